"""Stateful sessions: a persistent interpreter whose files outlive its restarts.

Each session is a holder process (init of the session's namespaces, owner of a tmpfs sized to
the disk quota) and one interpreter at a time. Runs in a session are serialised; across
sessions they share the engine's capacity. A run past its deadline interrupts the interpreter,
then kills it with every process it started: variables go, files stay, and the result says
the interpreter was restarted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable
from typing import TYPE_CHECKING

import anyio

from corral._fs import DEFAULT_MAX_ENTRIES, Listing
from corral._limits import Limits
from corral.engine._files import SessionFiles
from corral.engine._inputs import RunEventSink
from corral.engine._job import Job, validate_request, watch_cancel
from corral.engine._result import Evidence, ExecutionResult, FileInfo, Outcome
from corral.engine._stream import OutputEvent, OutputListener, iterate
from corral.errors import Busy, SessionClosed, SessionExists, SessionNotFound, WorkerError

if TYPE_CHECKING:
    from corral.engine._engine import Engine
    from corral.sandbox import Command, Holder, Worker

__all__ = ["Session", "SessionManager"]

_INTERRUPT_GRACE = 0.5  # seconds for interrupted code to run its finally blocks
_CLOSE_GRACE = 5.0  # seconds for a run in progress to notice its session was killed
_EXPIRY_TICK = 5.0  # seconds between idle-session sweeps


class Session:
    """One stateful interpreter; use ``run`` and the file methods, then ``close``."""

    def __init__(self, engine: Engine, session_id: str, holder: Holder, limits: Limits) -> None:
        self.id = session_id
        self.limits = limits
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self._engine = engine
        self._holder = holder
        self._lock = anyio.Lock()
        self._worker: Worker | None = None
        self._restart_note = False
        self._data_fd = holder.open_data_dir()
        self.files = SessionFiles(
            self._data_fd, holder.outer_id, holder.outer_id, engine.session_disk_bytes
        )
        self.closed = False
        self._closing = anyio.Event()

    def _check_open(self) -> None:
        if self.closed:
            raise SessionClosed(f"session {self.id} is closed")

    def touch(self) -> None:
        # Never backwards: hold_for may have moved it ahead.
        self.last_used = max(self.last_used, time.monotonic())

    def hold_for(self, seconds: float) -> None:
        """Keep the session from idle expiry for ``seconds`` from now, used or not.

        For front ends whose sessions have a lifetime of their own (an E2B sandbox's
        ``timeout``); afterwards the usual idle expiry applies again.
        """
        held = time.monotonic() + seconds - self._engine.session_idle_timeout
        self.last_used = max(self.last_used, held)

    async def run(
        self,
        code: str,
        *,
        limits: Limits | None = None,
        on_event: RunEventSink | None = None,
        cancel: anyio.Event | None = None,
        on_output: OutputListener | None = None,
        tenant: str = "",
    ) -> ExecutionResult:
        """Run ``code`` in this session's interpreter; state persists between runs.

        ``on_output`` receives output while the code runs, as for ``Engine.run``; ``tenant``
        names whose run this is, for fair scheduling (see ``Engine.run``).

        Raises:
            SessionClosed: the session was closed or expired.
            EngineClosed: the engine is not running.
        """
        self._check_open()
        self._engine._check_open()
        self.touch()
        limits = limits or self.limits
        started = time.perf_counter()
        evidence = self._engine.evidence(code, (), limits)
        problem = validate_request(code, (), limits)
        if problem:
            self._engine.count_outcome("invalid_input")
            return self._engine.refuse("invalid_input", problem, evidence, started)
        job = Job(started, limits, on_event, on_output)
        result: ExecutionResult | None = None
        deadline = anyio.current_time() + limits.timeout
        with anyio.CancelScope(deadline=deadline) as scope, self._engine.tracked(job, scope):
            async with watch_cancel(cancel, scope, job, self._closing):
                try:
                    async with self._lock:
                        self._check_open()
                        slot = self._engine.scheduler.slot(on_queued=job.queued, tenant=tenant)
                        async with slot:
                            job.admitted()
                            result = await self._execute(job, code, evidence)
                except Busy as exc:
                    result = self._engine.refuse("busy", str(exc), evidence, started)
                except OSError as exc:
                    # EMFILE, ENFILE, ENOMEM and the like: this run fails, the server goes on.
                    message = f"the server could not run it: {exc}"
                    result = self._engine.refuse("worker_error", message, evidence, started)
        if result is None:
            result = await self._stopped(job, evidence)
        self._engine.count_outcome(result.outcome)
        job.finished(result)
        self.touch()
        return result

    def stream(
        self,
        code: str,
        *,
        limits: Limits | None = None,
        on_event: RunEventSink | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
    ) -> AsyncGenerator[OutputEvent | ExecutionResult, None]:
        """Run ``code`` as ``run`` does; yield its OutputEvents, then its ExecutionResult.

        Leaving the loop early cancels the run (which restarts the interpreter).

        Raises:
            SessionClosed: the session was closed or expired.
            EngineClosed: the engine is not running, or stopped during the run.
        """
        self._check_open()

        def start(listener: OutputListener, stop: anyio.Event) -> Awaitable[ExecutionResult]:
            return self.run(
                code, limits=limits, on_event=on_event, cancel=stop, on_output=listener,
                tenant=tenant,
            )  # fmt: skip

        return iterate(self._engine._background(), start, cancel)

    async def _execute(self, job: Job, code: str, evidence: Evidence) -> ExecutionResult:
        if self._worker is None:
            self._worker = await self._holder.start_interpreter()
        job.restarted = self._restart_note
        self._restart_note = False
        result = await self._engine.execute_on(self._worker, job, code, (), evidence, session=True)
        if result.outcome == "worker_error":
            await self._discard_interpreter()
            result = dataclasses.replace(result, restarted=True)
        return result

    async def _discard_interpreter(self) -> None:
        with anyio.CancelScope(shield=True):
            worker, self._worker = self._worker, None
            if worker is not None:
                with contextlib.suppress(WorkerError):
                    await self._holder.kill_interpreter()
                worker.close()
            self._restart_note = True

    async def _stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        outcome: Outcome = "cancelled" if job.cancelled_explicitly else "timeout"
        what = job.stop_reason or (
            "the run was cancelled"
            if outcome == "cancelled"
            else f"the run exceeded its {job.limits.timeout:g} s time limit"
        )
        if self.closed:
            return job.stopped(outcome, "the session was closed while the code ran", evidence)
        if job.worker is None:
            message = f"{what} before the code started; the session is unchanged"
            return job.stopped(outcome, message, evidence)
        worker = job.worker
        with anyio.CancelScope(shield=True):
            worker.interrupt()
            with anyio.move_on_after(_INTERRUPT_GRACE):
                await worker.wait_readable()
            job.drain(worker)
            await self._discard_interpreter()
        job.restarted = True
        message = f"{what}; the interpreter was restarted: variables are lost, files are kept"
        return job.stopped(outcome, message, evidence)

    async def start_command(
        self, argv: list[str], env: dict[str, str], cwd: str, *, cpu_seconds: int
    ) -> Command:
        """Start a program inside this session's sandbox, beside its interpreter.

        It runs as the interpreter does (same namespaces, files, seccomp policy and static
        limits, the session's memory bound) and with the session's environment plus ``env``;
        restarting the interpreter ends it. The caller reads its pipes and closes it.

        Raises:
            SessionClosed: the session was closed or expired.
            WorkerCrashed: the session refused it (too many commands) or is gone.
        """
        self._check_open()
        self.touch()
        return await self._holder.start_command(
            argv, env, cwd, memory_bytes=self.limits.memory_bytes, cpu_seconds=cpu_seconds
        )

    async def put_file(self, path: str, data: bytes | AsyncIterable[bytes]) -> FileInfo:
        self._check_open()
        self.touch()
        return await self.files.put(path, data)

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        self._check_open()
        self.touch()
        return await self.files.get(path, max_bytes)

    async def list_files(self, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> Listing:
        """The session's regular files, sorted: at most ``max_entries``; ``truncated`` says
        whether there were more (or the walk met its bound first)."""
        self._check_open()
        self.touch()
        return await self.files.list(max_entries)

    async def delete_file(self, path: str) -> None:
        self._check_open()
        self.touch()
        await self.files.delete(path)

    async def close(self) -> None:
        """Stop the interpreter and the holder; the session's files are deleted. Idempotent."""
        if self.closed:
            return
        self.closed = True
        # A run in progress is cancelled and its interpreter killed; the descriptors are
        # released only after the run has ended, so no task ever waits on a closed one.
        self._closing.set()
        self._holder.kill()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_GRACE):
            async with self._lock:
                pass
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        self._holder.close()
        with contextlib.suppress(OSError):
            os.close(self._data_fd)
        self._engine.forget_session(self.id)


class SessionManager:
    """The engine's sessions by id, and their idle expiry."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sessions: dict[str, Session] = {}

    async def open(self, *, session_id: str | None, limits: Limits) -> Session:
        session_id = session_id or secrets.token_urlsafe(16)
        if session_id in self._sessions:
            raise SessionExists(f"session {session_id} already exists")
        holder = await self._engine.spawn_holder()
        try:
            await holder.wait_ready()
            session = Session(self._engine, session_id, holder, limits)
        except BaseException:
            holder.close()
            raise
        self._sessions[session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(f"no session {session_id}") from None

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def all(self) -> list[Session]:
        return list(self._sessions.values())

    async def expire_loop(self) -> None:
        while True:
            await anyio.sleep(_EXPIRY_TICK)
            await self.expire_idle()

    async def expire_idle(self) -> None:
        cutoff = time.monotonic() - self._engine.session_idle_timeout
        for session in list(self._sessions.values()):
            if session.last_used < cutoff and not session._lock.locked():
                await session.close()

    async def close_all(self) -> None:
        for session in list(self._sessions.values()):
            await session.close()
