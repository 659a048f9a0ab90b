"""Stateful sessions (placeholder until the session worker lands)."""

from __future__ import annotations

from typing import Any

import anyio

from corral.errors import SessionNotFound

__all__ = ["SessionManager"]


class SessionManager:
    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._sessions: dict[str, Any] = {}

    async def open(self, *, session_id: str | None, limits: Any) -> Any:
        raise NotImplementedError

    def get(self, session_id: str) -> Any:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    def all(self) -> list[Any]:
        return list(self._sessions.values())

    async def expire_loop(self) -> None:
        await anyio.sleep_forever()

    async def close_all(self) -> None:
        self._sessions.clear()
