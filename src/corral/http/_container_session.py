"""Container mode's one session: opened on first use, opened again if it was lost."""

from __future__ import annotations

import anyio

from corral.errors import SessionClosed, SessionNotFound
from corral.http._engine_api import EngineAPI, SessionAPI

__all__ = ["ContainerSession"]


class ContainerSession:
    """The process's one interpreter session, opened on first use, reopened if it was lost."""

    def __init__(self, engine: EngineAPI) -> None:
        self._engine = engine
        self._session: SessionAPI | None = None
        self._lock = anyio.Lock()

    async def get(self) -> SessionAPI:
        async with self._lock:
            if self._session is not None:
                try:
                    self._engine.get_session(self._session.id)
                except (SessionNotFound, SessionClosed):
                    self._session = None
            if self._session is None:
                self._session = await self._engine.open_session()
            return self._session
