"""E2B sandboxes: corral sessions owned by the key that created them, with E2B's lifetime.

A sandbox's id is its only name on the data plane for the calls the SDK sends without an
access token (``/contexts``), so ids carry 128 random bits; every other data-plane call must
also carry the sandbox's own ``envdAccessToken``. A sandbox lives until it is killed or its
``timeout`` passes (``set_timeout`` moves that end); the engine's idle expiry holds off until
then (``Session.hold_for``) and ends the session soon after, if no request came to kill it;
a session the engine closed reads as a killed sandbox.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.e2b import _lifecycle
from corral.e2b._contexts import HOME, Contexts
from corral.e2b._lifecycle import Lifecycle
from corral.e2b._metrics import SandboxMetrics
from corral.e2b._port_access import PortAccess
from corral.e2b._processes import Process
from corral.engine import Session, SessionManager, SnapshotMeta
from corral.errors import CorralError
from corral.network import NO_NETWORK, SandboxNetwork

__all__ = [
    "MAX_TIMEOUT",
    "SANDBOX_CPUS",
    "PortAccess",
    "Sandbox",
    "Sandboxes",
    "SessionOpener",
    "TooManySandboxes",
]

logger = logging.getLogger("corral.e2b")

SANDBOX_CPUS = 1
"""The CPUs ``get_info`` and ``get_metrics`` show: a sandbox's fair share is one CPU's weight."""
MAX_TIMEOUT = 24 * 3600
"""Seconds: the longest lifetime E2B grants a sandbox (and so corral)."""
_ID_BYTES = 16  # 128 random bits: ids are the only secret of the /contexts calls
_TOKEN_BYTES = 32


class SessionOpener(Protocol):
    """The part of ``corral.engine.Engine`` sandboxes need."""

    async def open_session(
        self,
        *,
        tenant: str = "",
        network: SandboxNetwork = NO_NETWORK,
        template: str = "",
        snapshot: str | None = None,
    ) -> Session: ...

    def sessions(self) -> list[Session]: ...

    @property
    def paused(self) -> SessionManager: ...


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
    metrics: SandboxMetrics
    """Its CPU, memory and disk samples, for ``get_metrics``."""
    commands: dict[int, Process] = field(default_factory=dict)
    """Its running processes by pid; each leaves when it ends (``_processes``)."""
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    timer_running: bool = False
    watchers: dict[str, Any] = field(default_factory=dict)
    """Its sync SDK's folder watchers by id (``_watch``)."""
    ports: PortAccess = field(default_factory=PortAccess)
    """Who may reach its ports (``_ports``); kept across a pause and a restart."""

    @property
    def alive(self) -> bool:
        """Running within its lifetime, or paused (a paused one waits, however long)."""
        if self.session.closed:
            return False
        return self.session.paused is not None or time.time() < self.end_at

    @property
    def running(self) -> bool:
        return self.alive and self.session.paused is None

    def live_until(self, end_at: float) -> None:
        """Its new end (wall clock); the engine's idle expiry waits for it too."""
        self.end_at = end_at
        self.session.hold_for(end_at - time.time())


def _adopted(session: Session, fields: _lifecycle.Adopted) -> Sandbox:
    """The paused sandbox a session was before a restart, as it was."""
    return Sandbox(
        id=fields.id, owner=fields.owner, template=fields.template, session=session,
        access_token=fields.token, metadata=fields.metadata, env_vars=fields.env,
        started_at=fields.started_at, end_at=time.time(), contexts=Contexts(fields.env),
        metrics=SandboxMetrics(session, cpu_count=SANDBOX_CPUS, disk_total=0),
        lifecycle=fields.lifecycle, ports=PortAccess(fields.public, fields.traffic_token),
    )  # fmt: skip


class Sandboxes:
    """Every running sandbox by id, at most ``max_per_owner`` per key."""

    def __init__(self, engine: SessionOpener, max_per_owner: int) -> None:
        self._engine = engine
        self._max_per_owner = max_per_owner
        self._by_id: dict[str, Sandbox] = {}
        for session in engine.sessions():  # paused by the last server at its shutdown
            adopted = _lifecycle.adopted_fields(session)
            if adopted is not None and session.paused is not None:
                self._by_id[adopted.id] = _adopted(session, adopted)

    async def create(
        self,
        owner: str,
        *,
        template: str,
        lifetime: int,
        metadata: Mapping[str, str],
        env_vars: Mapping[str, str],
        network: SandboxNetwork = NO_NETWORK,
        corral_template: str = "",
        cwd: str = HOME,
        lifecycle: Lifecycle | None = None,
        snapshot: str | None = None,
        public: bool = False,
    ) -> Sandbox:
        """``public``: its ports need no traffic access token.

        Raises: TooManySandboxes; EngineClosed; NetworkUnavailable; TemplateNotFound
        (``corral_template``: a template of corral's store, "" the default runtime);
        SnapshotNotFound; SnapshotError."""
        await self.sweep()
        running = sum(1 for s in self._by_id.values() if s.owner == owner and s.running)
        if running >= self._max_per_owner:
            raise TooManySandboxes(f"this key already runs {self._max_per_owner} sandboxes")
        session = await self._engine.open_session(
            tenant=owner, network=network, template=corral_template, snapshot=snapshot
        )
        try:
            await session.loopback_up()  # E2B's code reaches its own servers on localhost
        except BaseException:
            await session.close()
            raise
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
            contexts=Contexts(env_vars, cwd),
            metrics=SandboxMetrics(
                session, cpu_count=SANDBOX_CPUS, disk_total=session.files.quota_bytes
            ),
            ports=PortAccess(public=public),
        )
        sandbox.lifecycle = lifecycle or Lifecycle()
        sandbox.live_until(sandbox.end_at)
        session.labels.update(_lifecycle.labels_of(sandbox))
        session.background(sandbox.metrics.follow)
        _lifecycle.start_timer(sandbox)
        self._by_id[sandbox.id] = sandbox
        return sandbox

    @property
    def engine(self) -> SessionOpener:
        return self._engine

    def find(self, sandbox_id: str) -> Sandbox | None:
        """The running sandbox with this id, whoever owns it (the data plane's lookup)."""
        sandbox = self._by_id.get(sandbox_id)
        if sandbox is None or not sandbox.running:
            return None
        sandbox.session.touch()  # its lifetime is E2B's timeout, not the engine's idle expiry
        return sandbox

    def owned(self, owner: str, sandbox_id: str) -> Sandbox | None:
        """The sandbox, running or paused, if ``owner`` holds it; another key's sandbox reads
        as missing."""
        sandbox = self._by_id.get(sandbox_id)
        if sandbox is None or not sandbox.alive or sandbox.owner != owner:
            return None
        return sandbox

    async def wake(self, sandbox_id: str) -> None:
        """A data-plane request for a paused sandbox created with ``auto_resume`` resumes it."""
        sandbox = self._by_id.get(sandbox_id)
        if sandbox is None or not sandbox.alive or not sandbox.lifecycle.auto_resume:
            return
        if sandbox.session.paused is not None:
            try:
                await _lifecycle.resume(sandbox, _lifecycle.RESUME_LIFETIME)
            except CorralError as exc:  # it stays paused: the request finds no running sandbox
                logger.warning("sandbox %s could not resume on its traffic: %s", sandbox_id, exc)

    def alive(self) -> list[Sandbox]:
        """Every running sandbox, whoever owns it (a signed URL names none: ``_signed``)."""
        return [s for s in self._by_id.values() if s.running]  # a paused one serves no files

    def of_owner(self, owner: str) -> list[Sandbox]:
        return [s for s in self._by_id.values() if s.owner == owner and s.alive]

    def snapshots(self, owner: str) -> list[SnapshotMeta]:
        """``owner``'s snapshots, oldest first."""
        return self._engine.paused.snapshots(owner)

    def delete_snapshot(self, snapshot_id: str, owner: str) -> bool:
        return self._engine.paused.delete_snapshot(snapshot_id, owner)

    async def kill(self, sandbox: Sandbox) -> None:
        self._by_id.pop(sandbox.id, None)
        # Closing the session ends its processes and the tasks that follow them.
        await sandbox.session.close()

    async def sweep(self) -> None:
        """Kill the sandboxes past their end; keep the others' sessions from idling out."""
        for sandbox in list(self._by_id.values()):
            if sandbox.alive:
                if sandbox.running:
                    sandbox.session.touch()
            elif sandbox.lifecycle.on_timeout == "pause" and not sandbox.session.closed:
                await _lifecycle.pause_or_kill(sandbox)
            else:
                await self.kill(sandbox)

    async def close_all(self) -> None:
        for sandbox in list(self._by_id.values()):
            await self.kill(sandbox)
