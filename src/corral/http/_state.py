"""What the routes share, hung on ``app.state``, and the slice of the engine they use.

``EngineAPI`` and ``SessionAPI`` name exactly the part of ``corral.engine``'s public API the
HTTP layer calls (docs/engine-api.md), nothing below it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from fastapi import Request

from corral._config import Config
from corral._limits import Limits
from corral.engine import ExecutionResult, FileInfo, OutputListener
from corral.http._auth import Caller, Keyring
from corral.http._metrics import Metrics

if TYPE_CHECKING:
    from corral.http._container import ContainerSession
    from corral.http._sessions import Registry
    from corral.http._store import FileStore

__all__ = [
    "EngineAPI",
    "FileLike",
    "Gateway",
    "SessionAPI",
    "State",
    "caller_of",
    "require_caller",
    "state_of",
]


class FileLike(Protocol):
    """A listed session file: ``corral._fs.FileEntry`` or ``corral.engine.FileInfo``."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...


class SessionAPI(Protocol):
    """A stateful engine session (``corral.engine.Session``)."""

    @property
    def id(self) -> str: ...

    async def run(
        self,
        code: str,
        *,
        limits: Limits | None = None,
        cancel: anyio.Event | None = None,
        on_output: OutputListener | None = None,
        tenant: str = "",
    ) -> ExecutionResult: ...

    async def put_file(self, path: str, data: bytes | AsyncIterable[bytes]) -> FileInfo: ...

    async def get_file(self, path: str) -> bytes: ...

    async def open_file(self, path: str) -> tuple[int, int]: ...

    async def list_files(self, *, max_entries: int = ...) -> Sequence[FileLike]: ...

    async def close(self) -> None: ...


class EngineAPI(Protocol):
    """The engine (``corral.engine.Engine``), started by whoever built the app."""

    async def run(
        self,
        code: str,
        *,
        limits: Limits | None = None,
        cancel: anyio.Event | None = None,
        on_output: OutputListener | None = None,
        tenant: str = "",
    ) -> ExecutionResult: ...

    async def open_session(self) -> Any: ...

    def get_session(self, session_id: str) -> Any: ...

    def statistics(self) -> Any: ...


@dataclass(slots=True)
class Gateway:
    """Gateway-mode services."""

    keyring: Keyring
    store: FileStore
    registry: Registry


@dataclass(slots=True)
class State:
    """Everything a request handler may use."""

    engine: EngineAPI
    config: Config
    metrics: Metrics
    gateway: Gateway | None = None
    container: ContainerSession | None = None

    @property
    def keyring(self) -> Keyring:
        assert self.gateway is not None
        return self.gateway.keyring

    @property
    def store(self) -> FileStore:
        assert self.gateway is not None
        return self.gateway.store

    @property
    def registry(self) -> Registry:
        assert self.gateway is not None
        return self.gateway.registry


def state_of(request: Request) -> State:
    """The app's shared state."""
    state = request.app.state.corral
    assert isinstance(state, State)
    return state


def caller_of(request: Request) -> Caller:
    """The authenticated caller (401 otherwise), resolved once per request."""
    caller = getattr(request.state, "caller", None)
    if caller is None:
        gateway = state_of(request).gateway
        assert gateway is not None
        caller = gateway.keyring.authenticate(request)
        request.state.caller = caller
    assert isinstance(caller, Caller)
    return caller


async def require_caller(request: Request) -> Caller:
    """``caller_of`` as a dependency; async, so FastAPI does not hop to its thread pool."""
    return caller_of(request)
