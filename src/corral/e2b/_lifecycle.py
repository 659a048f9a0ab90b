"""E2B sandboxes that pause: the lifecycle a sandbox was created with, its pause and resume,
and what it keeps with its session so that it outlives a restart.

``lifecycle={"on_timeout": "pause"}`` (E2B's ``autoPause``; ``autoPauseMemory`` false makes it
a filesystem pause) pauses a sandbox at its timeout instead of killing it; ``auto_resume``
(``autoResume``) lets its next data-plane request resume it. A paused sandbox holds no CPU
and no worker slot; ``connect`` resumes it; ``kill`` ends it. Every field the sandbox needs
after a restart is a label of its session (``_keepsafe``'s ``labels``), written with it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio

from corral.e2b._contexts import Contexts
from corral.e2b._metrics import SandboxMetrics
from corral.e2b._port_access import PortAccess
from corral.engine import Session
from corral.errors import SnapshotError

__all__ = [
    "LABEL",
    "RESUME_LIFETIME",
    "Lifecycle",
    "adopted_fields",
    "labels_of",
    "pause",
    "pause_or_kill",
    "resume",
    "start_timer",
]

logger = logging.getLogger("corral.e2b")

LABEL = "e2b.sandbox"
"""The session label that holds an E2B sandbox's fields (JSON)."""
PauseMode = Literal["full", "filesystem"]
RESUME_LIFETIME = 300.0
"""Seconds a sandbox resumed by its traffic (``auto_resume``) lives: E2B's default timeout."""
_TICK = 1.0  # seconds between looks at a pausing sandbox's end (set_timeout moves it)
_MARGIN = 60.0  # seconds the engine's idle expiry waits past a pausing sandbox's end


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What happens at a sandbox's timeout, and whether traffic resumes it."""

    on_timeout: Literal["kill", "pause"] = "kill"
    mode: PauseMode = "full"
    auto_resume: bool = False

    @classmethod
    def parse(
        cls,
        auto_pause: bool | None,
        auto_pause_memory: bool | None,
        auto_resume: bool | dict[str, Any] | None,
    ) -> Lifecycle:
        if isinstance(auto_resume, dict):
            auto_resume = auto_resume.get("enabled") is True
        return cls(
            on_timeout="pause" if auto_pause else "kill",
            mode="filesystem" if auto_pause_memory is False else "full",
            auto_resume=bool(auto_resume) and bool(auto_pause),
        )

    def as_e2b(self) -> dict[str, Any]:
        return {"onTimeout": self.on_timeout, "autoResume": self.auto_resume}


class Sandbox(Protocol):
    """What pausing needs of ``_sandboxes.Sandbox``."""

    id: str
    owner: str
    template: str
    session: Session
    access_token: str
    metadata: dict[str, str]
    env_vars: dict[str, str]
    started_at: float
    end_at: float
    contexts: Contexts
    metrics: SandboxMetrics
    lifecycle: Lifecycle
    timer_running: bool
    ports: PortAccess

    def live_until(self, end_at: float) -> None: ...


def labels_of(sandbox: Sandbox) -> dict[str, str]:
    """The sandbox's fields, as its session keeps them (never its processes' state)."""
    fields = {
        "id": sandbox.id,
        "owner": sandbox.owner,
        "template": sandbox.template,
        "token": sandbox.access_token,
        "metadata": sandbox.metadata,
        "env": sandbox.env_vars,
        "started_at": sandbox.started_at,
        "lifecycle": [sandbox.lifecycle.on_timeout, sandbox.lifecycle.mode,
                      sandbox.lifecycle.auto_resume],
        "ports": [sandbox.ports.public, sandbox.ports.token],
    }  # fmt: skip
    return {LABEL: json.dumps(fields)}


@dataclass(frozen=True, slots=True)
class Adopted:
    """A sandbox's fields read back from its session's label (written by ``labels_of``)."""

    id: str
    owner: str
    template: str
    token: str
    metadata: dict[str, str]
    env: dict[str, str]
    started_at: float
    lifecycle: Lifecycle
    public: bool
    traffic_token: str


def adopted_fields(session: Session) -> Adopted | None:
    """The fields of the sandbox a session was, or None (not a sandbox's, or unreadable)."""
    raw = session.labels.get(LABEL)
    if raw is None:
        return None
    try:
        fields = json.loads(raw)
        action, mode, auto = fields["lifecycle"]
        public, traffic_token = fields["ports"]
        return Adopted(
            id=str(fields["id"]), owner=str(fields["owner"]), template=str(fields["template"]),
            token=str(fields["token"]),
            metadata={str(k): str(v) for k, v in fields["metadata"].items()},
            env={str(k): str(v) for k, v in fields["env"].items()},
            started_at=float(fields["started_at"]),
            lifecycle=Lifecycle(on_timeout="pause" if action == "pause" else "kill",
                                mode="filesystem" if mode == "filesystem" else "full",
                                auto_resume=bool(auto)),
            public=public is True, traffic_token=str(traffic_token),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        logger.error("session %s names an E2B sandbox that cannot be read", session.id)
        return None


async def pause(sandbox: Sandbox, mode: PauseMode) -> bool:
    """Pause it; False if it was paused already (E2B's 409).

    Raises:
        SnapshotError: its state could not be kept (it runs on).
    """
    if sandbox.session.paused is not None:
        return False
    sandbox.session.labels.update(labels_of(sandbox))
    kept = await sandbox.session.pause(mode)
    if kept != mode:
        logger.warning("sandbox %s: paused %s, not %s", sandbox.id, kept, mode)
    return True


async def resume(sandbox: Sandbox, lifetime: float) -> None:
    """Resume a paused sandbox for ``lifetime`` more seconds (nothing if it runs)."""
    if sandbox.session.paused is None:
        return
    from_disk = not sandbox.session.pause_state.frozen
    await sandbox.session.resume()
    if from_disk:
        # A new interpreter: the globals kept are the default context's now, the others
        # start afresh, and the sandbox's envVars are applied again.
        sandbox.contexts.interpreter_restarted()
    sandbox.metrics.disk_total = sandbox.session.files.quota_bytes  # unknown while on disk
    sandbox.live_until(time.time() + lifetime)
    start_timer(sandbox)


def start_timer(sandbox: Sandbox) -> None:
    """A sandbox that pauses at its timeout: its session waits for it (never idles out
    first), and a task pauses it once its end has come."""
    if sandbox.lifecycle.on_timeout != "pause" or sandbox.timer_running:
        return
    sandbox.timer_running = True
    sandbox.session.hold_for(sandbox.end_at - time.time() + _MARGIN)
    sandbox.session.background(lambda: timer(sandbox))


async def pause_or_kill(sandbox: Sandbox) -> None:
    """At its timeout: paused as its lifecycle says, or ended if it cannot be."""
    try:
        await pause(sandbox, sandbox.lifecycle.mode)
    except SnapshotError as exc:
        logger.warning("sandbox %s could not pause at its timeout: %s", sandbox.id, exc)
        await sandbox.session.close()


async def timer(sandbox: Sandbox) -> None:
    try:
        while sandbox.session.paused is None and not sandbox.session.closed:
            left = sandbox.end_at - time.time()
            if left <= 0:
                await pause_or_kill(sandbox)
                return
            sandbox.session.hold_for(left + _MARGIN)
            await anyio.sleep(min(left, _TICK))
    finally:
        sandbox.timer_running = False
