"""What the routes share, hung on ``app.state``, and the slice of the engine they use.

``EngineAPI`` and ``SessionAPI`` name exactly the part of ``corral.engine``'s public API the
HTTP layer calls (docs/engine-api.md), nothing below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from corral._config import Config
from corral.http._auth import Caller, Keyring
from corral.http._container_session import ContainerSession
from corral.http._engine_api import EngineAPI
from corral.http._metrics import Metrics
from corral.http._sessions import Registry
from corral.http._store import FileStore
from corral.network import NetworkCeiling

__all__ = [
    "Gateway",
    "State",
    "caller_of",
    "require_caller",
    "state_of",
]


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
    network: NetworkCeiling = field(default_factory=NetworkCeiling)
    """The server's ``[network]`` ceiling (empty: no sandbox has a network)."""

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
