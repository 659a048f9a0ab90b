"""Stateful sessions: a persistent interpreter whose files outlive its restarts.

Each session is a holder process (init of the session's namespaces, owner of a tmpfs sized to
the disk quota) and one interpreter at a time. Runs in a session are serialised; across
sessions they share the engine's capacity. A run past its deadline interrupts the interpreter,
then kills it with every process it started: variables go, files stay, and the result says
the interpreter was restarted. A run may ask to keep the interpreter instead (Jupyter's
interrupt, which E2B's contexts keep): then only an interpreter that does not come back from
the interrupt within a short grace is restarted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Sequence,
)
from types import TracebackType
from typing import TYPE_CHECKING

import anyio

from corral._fs import DEFAULT_MAX_ENTRIES, Listing
from corral._limits import Limits
from corral.engine._files import SessionFiles
from corral.engine._inputs import Input, RunEventSink
from corral.engine._job import Job
from corral.engine._result import Evidence, ExecutionResult, FileInfo
from corral.engine._runs import Runs, stop_message
from corral.engine._stream import OutputEvent, OutputListener, iterate
from corral.errors import SessionClosed, SessionExists, SessionNotFound, WorkerError
from corral.sandbox import Holder, Worker

if TYPE_CHECKING:
    from corral.sandbox import Command

__all__ = ["INTERRUPT_GRACE", "Session", "SessionManager"]

logger = logging.getLogger("corral.engine")

INTERRUPT_GRACE = 2.0
"""Seconds a stopped run's code has to come back from its interrupt (run its finally blocks,
report) before its interpreter is killed and restarted."""
_RESTART_GRACE = 0.5  # seconds for code to run its finally blocks before a restart kills it
_CLOSE_GRACE = 5.0  # seconds for a run in progress to notice its session was killed
_EXPIRY_TICK = 5.0  # seconds between idle-session sweeps


class _Interpreter:
    """A session's side of the run path: its holder, its one interpreter, its run lock."""

    def __init__(self, runs: Runs, session_id: str, holder: Holder) -> None:
        self._runs = runs
        self.session_id = session_id
        self.holder = holder
        self.lock = anyio.Lock()
        self.worker: Worker | None = None
        self.restart_note = False
        self.closed = False
        self.closing_event = anyio.Event()

    def check_open(self) -> None:
        if self.closed:
            raise SessionClosed(f"session {self.session_id} is closed")

    @contextlib.asynccontextmanager
    async def serial(self) -> AsyncIterator[object]:
        async with self.lock:
            self.check_open()
            yield self

    def closing(self) -> anyio.Event:
        return self.closing_event

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        if self.worker is None:
            self.worker = await self.holder.start_interpreter()
        job.restarted = self.restart_note
        self.restart_note = False
        result = await self._runs.execute_on(self.worker, job, code, inputs, evidence)
        if result.outcome == "worker_error":
            await self.discard()
            result = dataclasses.replace(result, restarted=True)
        return result

    async def interrupted(self, job: Job, *, keep_state: bool) -> None:
        # Deadline, cancel or a caller gone mid-run: the code may still be running.
        worker = job.worker
        if worker is None or self.closed:
            return
        if keep_state and await self._interrupt(worker, job):
            job.kept = True
            return
        if not keep_state:
            # Interrupt it so its finally blocks run, then replace the interpreter.
            worker.interrupt()
            with anyio.move_on_after(_RESTART_GRACE):
                await worker.wait_readable()
        job.drain(worker)
        await self.discard()
        job.restarted = True

    async def _interrupt(self, worker: Worker, job: Job) -> bool:
        """KeyboardInterrupt in the code; True if the interpreter reported back in time.

        Its report is read as any other (bounded by the run's limits) and its output goes to
        this run, so nothing of it reaches the next one.
        """
        with anyio.move_on_after(INTERRUPT_GRACE):
            try:
                # Only a run that began takes the signal: one that lands while the
                # interpreter is idle or reading its request is ignored there.
                await worker.wait_started()
                await self.holder.interrupt_interpreter()
                await worker.settle(job.capture.stdout, job.capture.stderr)
            except WorkerError:
                return False
            return True
        return False

    async def discard(self) -> None:
        with anyio.CancelScope(shield=True):
            worker, self.worker = self.worker, None
            if worker is not None:
                with contextlib.suppress(WorkerError):
                    await self.holder.kill_interpreter()
                worker.close()
            self.restart_note = True

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        outcome, what = stop_message(job)
        if self.closed:
            return job.stopped(outcome, "the session was closed while the code ran", evidence)
        if job.worker is None:
            message = f"{what} before the code started; the session is unchanged"
        elif job.kept:
            message = f"{what}; the code was interrupted: variables and files are kept"
        else:
            message = f"{what}; the interpreter was restarted: variables are lost, files are kept"
        return job.stopped(outcome, message, evidence)

    async def close(self) -> None:
        self.closed = True
        # A run in progress is cancelled and its interpreter killed; the descriptors are
        # released only after the run has ended, so no task ever waits on a closed one.
        self.closing_event.set()
        self.holder.kill()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_GRACE):
            async with self.lock:
                pass
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        self.holder.close()


@dataclasses.dataclass(slots=True, frozen=True)
class _Run:
    """One run's view of its session's interpreter: what a stop leaves of it."""

    interpreter: _Interpreter
    keep_state: bool

    def serial(self) -> contextlib.AbstractAsyncContextManager[object]:
        return self.interpreter.serial()

    def closing(self) -> anyio.Event:
        return self.interpreter.closing()

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        return await self.interpreter.execute(job, code, inputs, evidence)

    async def interrupted(self, job: Job) -> None:
        await self.interpreter.interrupted(job, keep_state=self.keep_state)

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        return self.interpreter.stopped(job, evidence)


class Session:
    """One stateful interpreter; use ``run`` and the file methods, then ``close``.

    Use as ``async with await engine.open_session() as session:``; leaving the block closes it.
    """

    def __init__(
        self,
        runs: Runs,
        session_id: str,
        holder: Holder,
        limits: Limits,
        *,
        disk_bytes: int,
        idle_timeout: float,
        on_close: Callable[[str], None],
    ) -> None:
        self.id = session_id
        self._idle_timeout = idle_timeout
        self.limits = limits
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self._runs = runs
        self._interpreter = _Interpreter(runs, session_id, holder)
        self._data_fd = holder.open_data_dir()
        self.files = SessionFiles(self._data_fd, holder.outer_id, holder.outer_id, disk_bytes)
        self._on_close = on_close
        self._background: set[anyio.CancelScope] = set()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._interpreter.closed

    @property
    def busy(self) -> bool:
        """A run holds or waits for the interpreter."""
        return self._interpreter.lock.locked()

    def touch(self) -> None:
        # Never backwards: hold_for may have moved it ahead.
        self.last_used = max(self.last_used, time.monotonic())

    def hold_for(self, seconds: float) -> None:
        """Keep the session from idle expiry for ``seconds`` from now, used or not.

        For front ends whose sessions have a lifetime of their own (an E2B sandbox's
        ``timeout``); afterwards the usual idle expiry applies again.
        """
        held = time.monotonic() + seconds - self._idle_timeout
        self.last_used = max(self.last_used, held)

    async def run(
        self,
        code: str,
        *,
        limits: Limits | None = None,
        on_event: RunEventSink | None = None,
        on_output: OutputListener | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
        cwd: str | None = None,
        keep_state: bool = False,
    ) -> ExecutionResult:
        """Run ``code`` in this session's interpreter; state persists between runs.

        The result lists the files the run created or changed in the session's folder.
        ``on_output`` receives output while the code runs, as for ``Engine.run``; ``tenant``
        names whose run this is, for fair scheduling (see ``Engine.run``). ``cwd`` is the
        working directory inside the sandbox for this run (``/home/user`` names the session
        folder too); None: ``/mnt/data``.

        A run stopped by its deadline or ``cancel`` restarts the interpreter (variables go,
        files stay: DIAL's semantics). With ``keep_state`` it is interrupted instead, as a
        Jupyter kernel is: KeyboardInterrupt in the code, and if the interpreter reports back
        within ``INTERRUPT_GRACE`` seconds it stays, with its variables and the processes it
        started; if not (code that ignores the interrupt) it is restarted after all. Either
        way the result is the usual ``timeout`` or ``cancelled`` one; ``restarted`` says which.

        Raises:
            SessionClosed: the session was closed or expired.
            EngineClosed: the engine is not running.
        """
        self._interpreter.check_open()
        self.touch()
        try:
            return await self._runs.run(
                _Run(self._interpreter, keep_state),
                code,
                inputs=(),
                limits=limits or self.limits,
                argv=None,
                on_event=on_event,
                on_output=on_output,
                cancel=cancel,
                tenant=tenant,
                cwd=cwd,
            )
        finally:
            self.touch()

    def stream(
        self,
        code: str,
        *,
        limits: Limits | None = None,
        on_event: RunEventSink | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
        keep_state: bool = False,
    ) -> AsyncGenerator[OutputEvent | ExecutionResult, None]:
        """Run ``code`` as ``run`` does; yield its OutputEvents, then its ExecutionResult.

        Leaving the loop early cancels the run (which restarts the interpreter, or with
        ``keep_state`` interrupts it).

        Raises:
            SessionClosed: the session was closed or expired.
            EngineClosed: the engine is not running, or stopped during the run.
        """
        self._interpreter.check_open()

        def start(listener: OutputListener, stop: anyio.Event) -> Awaitable[ExecutionResult]:
            return self.run(
                code, limits=limits, on_event=on_event, cancel=stop, on_output=listener,
                tenant=tenant, keep_state=keep_state,
            )  # fmt: skip

        return iterate(self._runs.background(), start, cancel)

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
        self._interpreter.check_open()
        self.touch()
        return await self._interpreter.holder.start_command(
            argv, env, cwd, memory_bytes=self.limits.memory_bytes, cpu_seconds=cpu_seconds
        )

    def background(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` in the engine, beyond the call that starts it (the output pump of a
        command that outlives its client); it is cancelled when the session closes. Its
        failure is logged, never raised into the engine.

        Raises:
            SessionClosed: the session was closed or expired.
            EngineClosed: the engine is not running.
        """
        self._interpreter.check_open()
        task_group = self._runs.background()
        scope = anyio.CancelScope()
        self._background.add(scope)

        async def guarded() -> None:
            try:
                with scope:
                    await work()
            except Exception:
                logger.exception("background work of session %s failed", self.id)
            finally:
                self._background.discard(scope)

        task_group.start_soon(guarded)

    async def put_file(self, path: str, data: bytes | AsyncIterable[bytes]) -> FileInfo:
        self._interpreter.check_open()
        self.touch()
        return await self.files.put(path, data)

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        self._interpreter.check_open()
        self.touch()
        return await self.files.get(path, max_bytes)

    async def open_file(self, path: str) -> tuple[int, int]:
        """``(fd, size)`` of a regular file, to stream it without holding it in memory; the
        caller closes ``fd``."""
        self._interpreter.check_open()
        self.touch()
        return await self.files.open(path)

    async def list_files(self, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> Listing:
        """The session's regular files, sorted: at most ``max_entries``; ``truncated`` says
        whether there were more (or the walk met its bound first)."""
        self._interpreter.check_open()
        self.touch()
        return await self.files.list(max_entries)

    async def delete_file(self, path: str) -> None:
        self._interpreter.check_open()
        self.touch()
        await self.files.delete(path)

    async def close(self) -> None:
        """Stop the interpreter and the holder; the session's files are deleted. Idempotent."""
        if self.closed:
            return
        for scope in list(self._background):
            scope.cancel()
        await self._interpreter.close()
        with contextlib.suppress(OSError):
            os.close(self._data_fd)
        self._on_close(self.id)


class SessionManager:
    """The engine's sessions by id, and their idle expiry."""

    def __init__(
        self,
        runs: Runs,
        spawn_holder: Callable[[], Awaitable[Holder]],
        *,
        idle_timeout: float,
        disk_bytes: int,
    ) -> None:
        self._runs = runs
        self._spawn_holder = spawn_holder
        self._idle_timeout = idle_timeout
        self._disk_bytes = disk_bytes
        self._sessions: dict[str, Session] = {}

    async def open(self, *, session_id: str | None, limits: Limits) -> Session:
        session_id = session_id or secrets.token_urlsafe(16)
        if session_id in self._sessions:
            raise SessionExists(f"session {session_id} already exists")
        holder = await self._spawn_holder()
        try:
            await holder.wait_ready()
            session = Session(
                self._runs,
                session_id,
                holder,
                limits,
                disk_bytes=self._disk_bytes,
                idle_timeout=self._idle_timeout,
                on_close=self.forget,
            )
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
        cutoff = time.monotonic() - self._idle_timeout
        for session in list(self._sessions.values()):
            if session.last_used < cutoff and not session.busy:
                await session.close()

    async def close_all(self) -> None:
        for session in list(self._sessions.values()):
            await session.close()
