"""E2B sandboxes: corral sessions owned by the key that created them, with E2B's lifetime.

A sandbox's id is its only name on the data plane for the calls the SDK sends without an
access token (``/contexts``), so ids carry 128 random bits; every other data-plane call must
also carry the sandbox's own ``envdAccessToken``. A sandbox lives until it is killed or its
``timeout`` passes (``set_timeout`` moves that end); the engine's idle expiry holds off until
then (``Session.hold_for``) and ends the session soon after, if no request came to kill it;
a session the engine closed reads as a killed sandbox.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from corral.e2b._contexts import Contexts
from corral.e2b._processes import Process
from corral.engine import Session

__all__ = [
    "MAX_TIMEOUT",
    "Sandbox",
    "Sandboxes",
    "SessionOpener",
    "TooManySandboxes",
]

MAX_TIMEOUT = 24 * 3600
"""Seconds: the longest lifetime E2B grants a sandbox (and so corral)."""
_ID_BYTES = 16  # 128 random bits: ids are the only secret of the /contexts calls
_TOKEN_BYTES = 32


class SessionOpener(Protocol):
    """The part of ``corral.engine.Engine`` sandboxes need."""

    async def open_session(self) -> Session: ...


class TooManySandboxes(Exception):
    """The key already holds its maximum of running sandboxes."""


@dataclass(slots=True, eq=False)
class Sandbox:
    """One E2B sandbox and the session behind it."""

    id: str
    owner: str
    template: str
    session: Session
    access_token: str
    metadata: dict[str, str]
    env_vars: dict[str, str]
    started_at: float
    end_at: float
    """Wall-clock time at which the sandbox is killed, unless ``set_timeout`` moves it."""
    contexts: Contexts
    run_lock: anyio.Lock = field(default_factory=anyio.Lock)
    """Held across a context switch and the run it prepares."""
    commands: dict[int, Process] = field(default_factory=dict)
    """Its running processes by pid; each leaves when it ends (``_processes``)."""

    @property
    def alive(self) -> bool:
        return not self.session.closed and time.time() < self.end_at

    def live_until(self, end_at: float) -> None:
        """Its new end (wall clock); the engine's idle expiry waits for it too."""
        self.end_at = end_at
        self.session.hold_for(end_at - time.time())


class Sandboxes:
    """Every running sandbox by id, at most ``max_per_owner`` per key."""

    def __init__(self, engine: SessionOpener, max_per_owner: int) -> None:
        self._engine = engine
        self._max_per_owner = max_per_owner
        self._by_id: dict[str, Sandbox] = {}

    async def create(
        self,
        owner: str,
        *,
        template: str,
        lifetime: int,
        metadata: Mapping[str, str],
        env_vars: Mapping[str, str],
    ) -> Sandbox:
        """Raises: TooManySandboxes; EngineClosed."""
        await self.sweep()
        if sum(1 for s in self._by_id.values() if s.owner == owner) >= self._max_per_owner:
            raise TooManySandboxes(f"this key already runs {self._max_per_owner} sandboxes")
        session = await self._engine.open_session()
        now = time.time()
        sandbox = Sandbox(
            id=secrets.token_hex(_ID_BYTES),
            owner=owner,
            template=template,
            session=session,
            access_token=secrets.token_urlsafe(_TOKEN_BYTES),
            metadata=dict(metadata),
            env_vars=dict(env_vars),
            started_at=now,
            end_at=now + lifetime,
            contexts=Contexts(env_vars),
        )
        sandbox.live_until(sandbox.end_at)
        self._by_id[sandbox.id] = sandbox
        return sandbox

    def find(self, sandbox_id: str) -> Sandbox | None:
        """The running sandbox with this id, whoever owns it (the data plane's lookup)."""
        sandbox = self._by_id.get(sandbox_id)
        if sandbox is None or not sandbox.alive:
            return None
        sandbox.session.touch()  # its lifetime is E2B's timeout, not the engine's idle expiry
        return sandbox

    def owned(self, owner: str, sandbox_id: str) -> Sandbox | None:
        """The running sandbox if ``owner`` holds it; another key's sandbox reads as missing."""
        sandbox = self.find(sandbox_id)
        return sandbox if sandbox is not None and sandbox.owner == owner else None

    def of_owner(self, owner: str) -> list[Sandbox]:
        return [s for s in self._by_id.values() if s.owner == owner and s.alive]

    async def kill(self, sandbox: Sandbox) -> None:
        self._by_id.pop(sandbox.id, None)
        # Closing the session ends its processes and the tasks that follow them.
        await sandbox.session.close()

    async def sweep(self) -> None:
        """Kill the sandboxes past their end; keep the others' sessions from idling out."""
        for sandbox in list(self._by_id.values()):
            if sandbox.alive:
                sandbox.session.touch()
            else:
                await self.kill(sandbox)

    async def close_all(self) -> None:
        for sandbox in list(self._by_id.values()):
            await self.kill(sandbox)
