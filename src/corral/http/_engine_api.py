"""The engine as the HTTP front end sees it: the typed seam of every route and service.

``corral.engine.Engine`` and ``corral.engine.Session`` fit these protocols; tests may build an
app over anything else that does (an engine whose every call fails, say).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from typing import Protocol

import anyio

from corral._limits import Limits
from corral.engine import (
    EngineStatistics,
    ExecutionResult,
    FileInfo,
    OutputListener,
    PauseMode,
    Session,
    SessionManager,
    SnapshotMeta,
)
from corral.network import SandboxNetwork
from corral.templates import Template

__all__ = ["EngineAPI", "FileLike", "SessionAPI"]


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

    labels: dict[str, str]
    keep_on_shutdown: bool

    @property
    def paused(self) -> PauseMode | None: ...

    async def pause(self, mode: PauseMode = ..., *, to_disk: bool = ...) -> PauseMode: ...

    async def resume(self) -> None: ...

    async def snapshot(self, mode: PauseMode = ..., *, name: str = ...) -> SnapshotMeta: ...

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
        network: SandboxNetwork = ...,
        template: str = "",
    ) -> ExecutionResult: ...

    async def open_session(
        self,
        *,
        tenant: str = "",
        network: SandboxNetwork = ...,
        template: str = "",
        snapshot: str | None = ...,
    ) -> Session: ...

    def template(self, name: str, tenant: str) -> Template:
        """Raises: TemplateNotFound."""

    @property
    def paused(self) -> SessionManager: ...

    def get_session(self, session_id: str) -> Session: ...

    def sessions(self) -> list[Session]: ...

    def statistics(self) -> EngineStatistics: ...
