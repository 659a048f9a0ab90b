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
import socket
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
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.to_thread

from corral._fs import DEFAULT_MAX_ENTRIES, Listing
from corral._limits import Limits
from corral.engine._files import SessionFiles
from corral.engine._inputs import Input, RunEventSink
from corral.engine._job import Job
from corral.engine._keepsafe import (
    FORMAT,
    Draft,
    Entry,
    KeepSafe,
    Kind,
    PauseMode,
    SnapshotMeta,
    new_id,
)
from corral.engine._network import Networks, SessionNetwork
from corral.engine._pause import (
    MAX_LOST,
    Keeper,
    NoHolder,
    PauseState,
    SpawnHolder,
    entry_name,
    freeze,
    load_state,
    read_files,
    save_state,
    thaw,
    write_files,
)
from corral.engine._result import Evidence, ExecutionResult, FileInfo
from corral.engine._runs import RunOptions, Runs, stop_message
from corral.engine._stream import OutputEvent, OutputListener, iterate
from corral.errors import (
    NetworkUnavailable,
    SessionClosed,
    SessionExists,
    SessionNotFound,
    SnapshotError,
    SnapshotNotFound,
    WorkerError,
)
from corral.network import NO_NETWORK, Inbound, SandboxNetwork, loopback_up
from corral.sandbox import MAX_INTERPRETERS, HolderLike, Worker

if TYPE_CHECKING:
    from corral.sandbox import Command, SandboxCgroup

__all__ = ["INTERRUPT_GRACE", "IdleAction", "Session", "SessionManager"]

logger = logging.getLogger("corral.engine")

INTERRUPT_GRACE = 2.0
"""Seconds a stopped run's code has to come back from its interrupt (run its finally blocks,
report) before its interpreter is killed and restarted."""
_RESTART_GRACE = 0.5  # seconds for code to run its finally blocks before a restart kills it
_CLOSE_GRACE = 5.0  # seconds for a run in progress to notice its session was killed
_EXPIRY_TICK = 5.0  # seconds between idle-session sweeps


def _always() -> bool:
    return True


class _Interpreter:
    """A session's side of the run path: its holder, one interpreter, its run lock.

    ``slot`` 0 is the session's own interpreter; the others run beside it (``Session.run``
    with ``interpreter=``), each with a lock of its own, so that their runs go side by side.
    """

    def __init__(self, runs: Runs, session_id: str, holder: HolderLike, slot: int = 0) -> None:
        self._runs = runs
        self.session_id = session_id
        self.holder = holder
        self.slot = slot
        self.lock = anyio.Lock()
        self.worker: Worker | None = None
        self.restart_note = False
        self.closed = False
        self.closing_event = anyio.Event()
        self.wake: Callable[[], Awaitable[None]] | None = None
        """Called with the lock held before each run: a paused session resumes first."""
        self.on_discard: Callable[[], None] | None = None
        """Called when this interpreter is killed (slot 0's kill ends the others too)."""
        self.settled: Callable[[], Awaitable[None]] | None = None
        """For one beside the session's own: waits until no pause or snapshot of the
        session is under way (``quiet``), before a run takes the lock."""
        self.quiet: Callable[[], bool] = _always

    def check_open(self) -> None:
        if self.closed:
            raise SessionClosed(f"session {self.session_id} is closed")

    @contextlib.asynccontextmanager
    async def serial(self) -> AsyncIterator[object]:
        while True:
            if self.settled is not None:
                await self.settled()  # not holding the lock, which a pause may be waiting for
            await self.lock.acquire()
            if self.settled is None or self.quiet():
                break
            self.lock.release()  # a pause or snapshot began meanwhile: after it
        try:
            self.check_open()
            if self.wake is not None:
                await self.wake()
            yield self
        finally:
            self.lock.release()

    def closing(self) -> anyio.Event:
        return self.closing_event

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        if self.worker is None:
            self.worker = await self.holder.start_interpreter(self.slot)
        job.restarted = self.restart_note
        job.counts_cpu = False  # the session's cgroup counts all of its CPU, runs or not
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
                await self.holder.interrupt_interpreter(self.slot)
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
                    await self.holder.kill_interpreter(self.slot)
                worker.close()
            self.restart_note = True
            if self.on_discard is not None:
                self.on_discard()

    def forget(self) -> None:
        """Its process is gone already (its holder's other kill, a new holder): the next
        run starts a fresh one and says the interpreter was restarted."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
            self.restart_note = True

    async def retire(self) -> None:
        """End an interpreter beside the session's own: a run in it is stopped as by a close,
        the process killed with what it left in its group."""
        self.closed = True
        self.closing_event.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_GRACE):
            async with self.lock:
                pass
        worker, self.worker = self.worker, None
        if worker is not None:
            try:
                with anyio.CancelScope(shield=True), contextlib.suppress(WorkerError):
                    await self.holder.kill_interpreter(self.slot)  # bounded by the holder's wait
            finally:
                worker.close()

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
    held: bool = False
    """The caller holds the session already (a pause's own cells)."""

    @property
    def holds_slot(self) -> bool:
        # With its cgroup, the session shares the CPU by weight with every sandbox: a run
        # that sleeps holds nothing another needs. Without, a slot is what bounds it.
        return self.interpreter.holder.cgroup is None

    def serial(self) -> contextlib.AbstractAsyncContextManager[object]:
        if self.held:
            return contextlib.nullcontext(self)
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
        holder: HolderLike | None,
        limits: Limits,
        *,
        disk_bytes: int,
        idle_timeout: float,
        on_close: Callable[[str], None],
        tenant: str = "",
        network: SessionNetwork | None = None,
        keeper: Keeper | None = None,
        policy: SandboxNetwork = NO_NETWORK,
    ) -> None:
        self.id = session_id
        self.tenant = tenant
        self._network = network
        self._policy = policy if network is None else network.policy
        self._idle_timeout = idle_timeout
        self.limits = limits
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self._runs = runs
        self._disk_bytes = disk_bytes
        self._interpreter = _Interpreter(runs, session_id, holder or NoHolder())
        self._interpreter.wake = self._wake
        self._interpreter.on_discard = self._forget_beside
        self._beside: dict[str, _Interpreter] = {}
        """Interpreters beside its own, by name (``run(interpreter=...)``)."""
        self._retiring: set[int] = set()
        """Slots of interpreters being closed: not given to a new one until they are gone."""
        self._transitions = 0
        """Pauses and snapshots under way: each holds every interpreter's lock, and a run in
        an interpreter beside the session's own waits for them before it takes its own."""
        self._settled = anyio.Event()
        self._settled.set()
        self._data_fd = -1
        self._files: SessionFiles | None = None
        self._inbound: Inbound | None = None
        """Its connections in (E2B's ports), made on first use, for its holder of now."""
        self._loopback = False
        """Whether its loopback is up (E2B's sandboxes): brought up again on a respawn."""
        if holder is not None:
            self._bind(holder)
        self._on_close = on_close
        self._background: set[anyio.CancelScope] = set()
        self._keeper = keeper
        self.pause_state = PauseState()
        """Whether it is paused, how, and what its last full pause could not keep."""
        self.labels: dict[str, str] = {}
        """What a front end keeps with the session across a pause to disk and a restart."""
        self.keep_on_shutdown = True
        """False: a shutdown closes it rather than pausing it to disk (a temporary session)."""
        self.spawn_holder: SpawnHolder | None = None
        """What makes its processes anew on a resume from disk (a template's zygote), when
        not the engine's default; a server restart forgets it (the default runtime then)."""

    def _bind(self, holder: HolderLike) -> None:
        self._interpreter.holder = holder
        for beside in self._beside.values():
            beside.holder = holder
            beside.forget()
        if self._inbound is not None:  # it reached into the holder before
            self._inbound.close()
            self._inbound = None
        self._data_fd = holder.open_data_dir()
        self._files = SessionFiles(
            self._data_fd, holder.outer_id, holder.outer_id, self._disk_bytes
        )

    @property
    def files(self) -> SessionFiles:
        """Its files (a paused session resumes on its next call; this needs it running).

        Raises:
            SessionClosed: it is closed, or paused to disk.
        """
        if self._files is None:
            raise SessionClosed(f"session {self.id} is paused: resume it first")
        return self._files

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
        """A run holds or waits for one of its interpreters."""
        return any(i.lock.locked() for i in (self._interpreter, *self._beside.values()))

    def _forget_beside(self) -> None:
        # Its own interpreter's kill ended every process of the session but the holder.
        for beside in self._beside.values():
            if not beside.lock.locked():  # a run in one finds out for itself
                beside.forget()

    def _beside_named(self, name: str) -> _Interpreter:
        """The interpreter ``name`` beside the session's own, made on first use.

        Raises:
            ValueError: the session holds its maximum of interpreters already.
        """
        beside = self._beside.get(name)
        if beside is not None:
            return beside
        taken = {i.slot for i in self._beside.values()} | self._retiring
        free = next((n for n in range(1, MAX_INTERPRETERS) if n not in taken), None)
        if free is None:
            raise ValueError(f"a session runs at most {MAX_INTERPRETERS} interpreters")
        beside = _Interpreter(self._runs, self.id, self._interpreter.holder, free)
        beside.wake = self._wake_beside
        beside.settled = self._settled_wait
        beside.quiet = self._quiet
        self._beside[name] = beside
        return beside

    async def _settled_wait(self) -> None:
        while self._transitions:
            await self._settled.wait()

    def _quiet(self) -> bool:
        return not self._transitions

    async def _wake_beside(self) -> None:
        if self.pause_state.paused is not None:  # the session's own lock, for its resume
            await self.resume()

    async def close_interpreter(self, name: str) -> None:
        """End the interpreter ``name`` beside the session's own (a run in it is stopped);
        the next run of that name starts a fresh one. Nothing if there is none."""
        beside = self._beside.pop(name, None)
        if beside is not None:
            self._retiring.add(beside.slot)
            try:
                await beside.retire()
            finally:
                self._retiring.discard(beside.slot)

    @property
    def network(self) -> SandboxNetwork:
        """What the session may reach now (nothing, unless it was opened with a network)."""
        return NO_NETWORK if self._network is None else self._network.policy

    async def update_network(self, policy: SandboxNetwork) -> None:
        """Replace what the session may reach, at once (E2B's ``update_network``): new
        connections are judged by ``policy``; nothing at all once it allows nothing.

        Raises:
            SessionClosed: the session was closed or expired.
            NetworkUnavailable: the server cannot give the session a network.
        """
        await self._ready()
        if self._network is None:
            raise NetworkUnavailable("this session was opened without a way to change its network")
        holder = self._interpreter.holder
        await self._network.update(policy, holder.pidfd, self.tenant, self.id)

    def cpu_ns(self) -> int:
        """CPU time every process of the session has used, runs or not (0 without cgroups)."""
        cgroup = self._interpreter.holder.cgroup
        return 0 if cgroup is None or self.closed else cgroup.cpu_ns()

    def memory(self) -> tuple[int, int]:
        """(bytes every process of the session holds now with the kernel memory they cause,
        the file pages among them); zeros without cgroups."""
        cgroup = self._interpreter.holder.cgroup
        if cgroup is None or self.closed:
            return 0, 0
        return cgroup.memory_bytes(), cgroup.memory_cache_bytes()

    def background_processes(self) -> int:
        """Processes the session runs beside its holder and interpreter: commands, and what
        code started and left running (0 without cgroups)."""
        holder = self._interpreter.holder
        if holder.cgroup is None or self.closed:
            return 0
        ours = 1 + holder.running_interpreters()
        return max(len(holder.cgroup.processes()) - ours, 0)

    def _use(self) -> None:
        """The preamble of every call on the session: refused once it is closed; it counts
        as used (no idle expiry from now).

        Raises:
            SessionClosed: the session was closed or expired.
        """
        self._interpreter.check_open()
        self.touch()

    async def _ready(self) -> None:
        """``_use``, and a paused session resumes first (its next operation wakes it)."""
        self._use()
        if self.pause_state.paused is not None:
            await self.resume()

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
        interpreter: str = "",
    ) -> ExecutionResult:
        """Run ``code`` in this session's interpreter; state persists between runs.

        ``interpreter`` names one beside the session's own ("" that one), made on first use,
        with state of its own: runs in different interpreters of a session go side by side
        (E2B's code contexts). They share the session's files, processes and walls; a
        restart of the session's own interpreter ends every one of them (each starts afresh,
        and its next result says it was restarted), a restart of another ends only it. A
        full pause to disk keeps the session's own interpreter's globals only.

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
        self._use()
        try:
            options = RunOptions(
                limits=limits or self.limits,
                on_event=on_event,
                on_output=on_output,
                cancel=cancel,
                tenant=tenant,
                cwd=cwd,
            )
            target = self._beside_named(interpreter) if interpreter else self._interpreter
            return await self._runs.run(_Run(target, keep_state), code, options)
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
        await self._ready()
        return await self._interpreter.holder.start_command(
            argv, env, cwd, memory_bytes=self.limits.memory_bytes, cpu_seconds=cpu_seconds
        )

    async def loopback_up(self) -> None:
        """Bring up this sandbox's loopback (its code reaches its own servers on localhost);
        a no-op where it has no namespace of its own (the in-process twin).

        Raises:
            IsolationError: the namespace could not be entered.
        """
        self._use()
        await self._loopback_up()

    async def _loopback_up(self) -> None:
        pidfd = self._interpreter.holder.pidfd
        if pidfd is None:
            return
        pidfd = os.dup(pidfd)
        try:
            await anyio.to_thread.run_sync(loopback_up, pidfd)
        finally:
            os.close(pidfd)
        self._loopback = True

    async def connect_port(self, port: int) -> socket.socket:
        """A socket connected to ``port`` on this sandbox's own loopback, made inside its
        network namespace (E2B's ports: ``corral.e2b._ports``).

        Raises:
            PortClosed: nothing listens there.
            SessionClosed: the session was closed or expired.
            NetworkUnavailable: it has no namespace of its own (the in-process twin).
            IsolationError: the namespace could not be entered.
        """
        self._use()
        if self._inbound is None:
            pidfd = self._interpreter.holder.pidfd
            if pidfd is None:
                raise NetworkUnavailable("this sandbox has no network namespace to reach into")
            self._inbound = Inbound(pidfd)
        return await self._inbound.connect(port)

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
        await self._ready()
        return await self.files.put(path, data)

    async def get_file(self, path: str, max_bytes: int | None = None) -> bytes:
        await self._ready()
        return await self.files.get(path, max_bytes)

    async def open_file(self, path: str) -> tuple[int, int]:
        """``(fd, size)`` of a regular file, to stream it without holding it in memory; the
        caller closes ``fd``."""
        await self._ready()
        return await self.files.open(path)

    async def list_files(self, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> Listing:
        """The session's regular files, sorted: at most ``max_entries``; ``truncated`` says
        whether there were more (or the walk met its bound first)."""
        await self._ready()
        return await self.files.list(max_entries)

    async def delete_file(self, path: str) -> None:
        await self._ready()
        await self.files.delete(path)

    # pause, resume, snapshot ---------------------------------------------------------------

    @property
    def paused(self) -> PauseMode | None:
        """How it is paused (None: running)."""
        return self.pause_state.paused

    async def pause(self, mode: PauseMode = "full", *, to_disk: bool = False) -> PauseMode:
        """Pause the session; returns how it was paused.

        ``full`` freezes every process of it where it is (no CPU, no slot; ``resume`` thaws
        it with everything it had); where there is no freezer, or with ``to_disk``, its
        files and the globals the interpreter can write go to the data folder instead and
        its processes end (``pause_state.lost`` names what was not kept). ``filesystem``
        keeps its files only: it resumes with a fresh interpreter. A run in progress
        finishes first. Pausing a paused session again changes nothing, except that
        ``to_disk`` moves a frozen one to disk.

        Raises:
            SessionClosed: the session was closed.
            SnapshotError: its state could not be written (it keeps running).
        """
        async with self._every_interpreter():
            self._interpreter.check_open()
            state = self.pause_state
            if state.paused is not None and not (to_disk and state.frozen):
                return state.paused
            if state.frozen:
                await self._thaw()
            cgroup = self._interpreter.holder.cgroup
            if mode == "full" and not to_disk and cgroup is not None and cgroup.can_freeze():
                await self._freeze(cgroup)
                return "full"
            kept = await self._to_disk(mode)
            logger.info("session %s paused to disk (%s)", self.id, kept)
            return kept

    @contextlib.asynccontextmanager
    async def _every_interpreter(self) -> AsyncIterator[None]:
        """Hold every interpreter's lock: the runs in progress finish first, and none starts
        until this is done (one in an interpreter made meanwhile waits too).

        The session's own lock is taken last: a run beside it holds its own lock when it
        takes that one to resume the session (``_wake_beside``).
        """
        self._transitions += 1
        if self._transitions == 1:
            self._settled = anyio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                for interpreter in (*self._beside.values(), self._interpreter):
                    await stack.enter_async_context(interpreter.lock)
                yield
        finally:
            self._transitions -= 1
            if not self._transitions:
                self._settled.set()

    async def _freeze(self, cgroup: SandboxCgroup) -> None:
        """Freeze it where it is, with its files on disk; thawed again, running as before,
        if they could not be written (a full disk, a cancelled call)."""
        await freeze(cgroup)
        self.pause_state = PauseState(paused="full", frozen=True, at=time.time())
        try:
            entry = await self._files_to_disk()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._thaw()
            raise
        self.pause_state = dataclasses.replace(self.pause_state, entry=entry)

    async def _files_to_disk(self) -> str | None:
        """While frozen: its files to disk (no process of it needs to run for that), so that
        a server killed meanwhile still finds them; None without a folder to keep them in."""
        if self._keeper is None:
            return None
        store = self._keeper.store
        with store.draft() as draft:
            lost = await write_files(self.files, draft.files)
            lost[IN_MEMORY] = "the server stopped while the session was paused in memory"
            meta = self._meta("paused", entry_name(self.id), "filesystem", lost)
            await anyio.to_thread.run_sync(store.commit, draft, meta)
        return meta.id

    async def _thaw(self) -> None:
        cgroup = self._interpreter.holder.cgroup
        if cgroup is not None:
            await thaw(cgroup)
        entry = self.pause_state.entry
        self.pause_state = PauseState()
        if entry is not None and self._keeper is not None:
            await anyio.to_thread.run_sync(self._keeper.store.delete, "paused", entry)

    def _keeps(self) -> Keeper:
        if self._keeper is None:
            raise SnapshotError("this engine has no folder to keep paused sessions in")
        return self._keeper

    async def _capture(self, draft: Draft, mode: PauseMode) -> tuple[PauseMode, dict[str, str]]:
        """Files (and in full mode the globals) into ``draft``; the mode kept, what was lost."""
        lost: dict[str, str] = {}
        if mode == "full" and self._interpreter.worker is not None:
            try:
                lost = await save_state(self._inside, self.files, draft.state)
            except SnapshotError as exc:
                logger.warning("session %s: %s; only its files are kept", self.id, exc)
                mode, lost = "filesystem", {"(interpreter)": str(exc)}
        lost.update(await write_files(self.files, draft.files))
        if lost:
            logger.info("session %s: not kept: %s", self.id, ", ".join(sorted(lost)))
        return mode, lost

    def _meta(
        self, kind: Kind, entry_id: str, mode: PauseMode, lost: dict[str, str]
    ) -> SnapshotMeta:
        if len(lost) > MAX_LOST:  # the files' and the globals' together: meta.json stays small
            kept = dict(list(lost.items())[: MAX_LOST - 1])
            lost = {**kept, "(more)": f"{len(lost) - len(kept)} more not kept"}
        return SnapshotMeta(
            format=FORMAT, id=entry_id, kind=kind, tenant=self.tenant, mode=mode,
            created_at=time.time(), source=self.id, lost=lost,
            memory_bytes=self.limits.memory_bytes, labels=dict(self.labels),
        )  # fmt: skip

    async def _to_disk(self, mode: PauseMode) -> PauseMode:
        keeper = self._keeps()
        with keeper.store.draft() as draft:
            mode, lost = await self._capture(draft, mode)
            entry_id = entry_name(self.id)
            meta = self._meta("paused", entry_id, mode, lost)
            await anyio.to_thread.run_sync(keeper.store.commit, draft, meta)
        self._release()
        self.pause_state = PauseState(paused=mode, at=time.time(), entry=entry_id, lost=lost)
        return mode

    def _release(self) -> None:
        """End the session's processes and its link; its id, labels and paused state stay."""
        if self._network is not None:
            self._network.close()
            self._network = None
        interpreter = self._interpreter
        if interpreter.worker is not None:
            interpreter.worker.close()
            interpreter.worker = None
        interpreter.holder.close()
        interpreter.holder = NoHolder()
        for beside in self._beside.values():
            beside.forget()
            beside.holder = interpreter.holder
        with contextlib.suppress(OSError):
            os.close(self._data_fd)
        self._data_fd, self._files = -1, None

    async def _inside(self, code: str) -> ExecutionResult:
        """Run one of corral's cells in the interpreter, the session already held."""
        options = RunOptions(limits=self.limits, tenant=self.tenant, admit=False)
        return await self._runs.run(_Run(self._interpreter, False, held=True), code, options)

    async def resume(self) -> None:
        """Resume a paused session (nothing if it runs): a frozen one thaws; one on disk
        gets new processes, its files back and, in full mode, its globals.

        Raises:
            SessionClosed: the session was closed.
            SnapshotError: its paused state is corrupt or could not be restored.
        """
        async with self._interpreter.lock:
            self._interpreter.check_open()
            await self._wake()

    async def _wake(self) -> None:
        state = self.pause_state
        if state.paused is None:
            return
        if state.frozen:
            await self._thaw()
            return
        keeper = self._keeps()
        assert state.entry is not None
        entry = await anyio.to_thread.run_sync(keeper.store.get, "paused", state.entry)
        await self._start_from(entry)
        await anyio.to_thread.run_sync(keeper.store.delete, "paused", state.entry)
        logger.info("session %s resumed from disk (%s)", self.id, entry.meta.mode)

    async def _start_from(self, entry: Entry) -> None:
        """New processes for the session, then the entry's files and globals in them."""
        keeper = self._keeps()
        holder, network = await keeper.respawn(
            self.tenant, self.limits, self._policy, self.spawn_holder
        )
        self._bind(holder)
        self._network = network
        self._interpreter.restart_note = False
        lost = dict(entry.meta.lost)
        try:
            if self._loopback:
                await self._loopback_up()
            await read_files(self.files, entry.files)
            if entry.state is not None:
                lost.update(await load_state(self._inside, self.files, entry.state))
        except BaseException:
            self._release()
            raise
        self.pause_state = PauseState(lost=lost)

    async def restore(self, entry: Entry) -> None:
        """Put a snapshot's files and globals into this (new, running) session.

        Raises:
            SnapshotError: the snapshot is corrupt.
        """
        async with self._interpreter.lock:
            self._interpreter.check_open()
            lost = dict(entry.meta.lost)
            await read_files(self.files, entry.files)
            if entry.state is not None:
                lost.update(await load_state(self._inside, self.files, entry.state))
            self.pause_state = PauseState(lost=lost)

    async def snapshot(self, mode: PauseMode = "full", *, name: str = "") -> SnapshotMeta:
        """Keep the session's state as a snapshot in the data folder; the session goes on.

        New sessions start from it (``Engine.open_session(snapshot=...)``), each its own copy.

        Raises:
            SessionClosed: the session was closed.
            SnapshotError: it could not be written.
        """
        keeper = self._keeps()
        async with self._every_interpreter():  # no run may go on while it thaws and freezes
            self._interpreter.check_open()
            state = self.pause_state
            if state.entry is not None and not state.frozen:  # on disk: its entry is the copy
                paused = await anyio.to_thread.run_sync(keeper.store.get, "paused", state.entry)
                return await anyio.to_thread.run_sync(
                    keeper.store.copy, paused, self._meta("snapshots", new_id("snap_"),
                    "filesystem" if mode == "filesystem" else paused.meta.mode, paused.meta.lost),
                )  # fmt: skip
            frozen = state.frozen
            if frozen:
                await self._thaw()  # its globals are written by its interpreter
            try:
                with keeper.store.draft() as draft:
                    kept, lost = await self._capture(draft, mode)
                    meta = self._meta("snapshots", new_id("snap_"), kept, lost)
                    meta = meta.model_copy(update={"name": name[:256]})
                    await anyio.to_thread.run_sync(keeper.store.commit, draft, meta)
            finally:
                if frozen:
                    await self._refreeze()
            return meta

    async def _refreeze(self) -> None:
        cgroup = self._interpreter.holder.cgroup
        if cgroup is not None and not self.closed:
            await self._freeze(cgroup)

    async def close(self) -> None:
        """Stop the interpreter and the holder; the session's files are deleted. Idempotent."""
        if self.closed:
            return
        state = self.pause_state
        if state.frozen:
            # SIGKILL first: a frozen process dies once thawed, never runs on.
            self._interpreter.holder.kill()
            await self._thaw()
        elif state.entry is not None and self._keeper is not None:
            with contextlib.suppress(OSError):
                self._keeper.store.delete("paused", state.entry)
        self._runs.cpu_ns_by_tenant[self.tenant] += self.cpu_ns()  # its cgroup goes with it
        if self._network is not None:
            self._network.close()
        if self._inbound is not None:
            self._inbound.close()
        for scope in list(self._background):
            scope.cancel()
        for beside in self._beside.values():
            beside.closed = True
            beside.closing_event.set()
        await self._interpreter.close()  # its holder's end is theirs
        for beside in self._beside.values():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_GRACE):
                async with beside.lock:
                    pass
            beside.forget()
        with contextlib.suppress(OSError):
            os.close(self._data_fd)
        self._on_close(self.id)


IdleAction = Literal["close", "pause"]
IN_MEMORY = "(in memory)"
"""The name, in ``lost``, of what a session paused in memory loses when its server dies."""


class SessionManager:
    """The engine's sessions by id, their idle expiry, and their paused state on disk.

    With a ``paused_dir``, a session may pause to disk, and what an earlier engine paused
    there (at its shutdown) is adopted at start: listed at once, resumed on first use.
    ``idle_action`` "pause" pauses an idle session instead of closing it; a paused session
    is closed ``paused_ttl`` seconds after its pause, and a tenant keeps at most
    ``max_paused`` paused sessions (the oldest is closed first, and logged).
    """

    def __init__(
        self,
        runs: Runs,
        spawn_holder: Callable[[str, Limits], Awaitable[HolderLike]],
        networks: Networks,
        *,
        idle_timeout: float,
        disk_bytes: int,
        paused_dir: str | None = None,
        idle_action: IdleAction = "close",
        paused_ttl: float = 7 * 24 * 3600.0,
        max_paused: int = 64,
    ) -> None:
        self._runs = runs
        self._spawn_holder = spawn_holder
        self._networks = networks
        self._idle_timeout = idle_timeout
        self._disk_bytes = disk_bytes
        self._sessions: dict[str, Session] = {}
        self.idle_action: IdleAction = idle_action
        self.paused_ttl = paused_ttl
        self.max_paused = max_paused
        self.store = None if paused_dir is None else KeepSafe(paused_dir)
        self.keeper = None if self.store is None else Keeper(self.store, self._respawn)
        self.unreadable: dict[str, SnapshotError] = {}
        """Paused entries found at start that could not be read (each is an error of its own)."""

    async def _respawn(
        self,
        tenant: str,
        limits: Limits,
        network: SandboxNetwork,
        spawn_holder: SpawnHolder | None = None,
    ) -> tuple[HolderLike, SessionNetwork]:
        holder = await (spawn_holder or self._spawn_holder)(tenant, limits)
        try:
            await holder.wait_ready()
            link = await self._networks.open(
                holder.pidfd, network, tenant=tenant, sandbox=f"session-{holder.pid}"
            )
        except BaseException:
            holder.close()
            raise
        return holder, SessionNetwork(self._networks, network, link)

    def adopt_paused(self, limits: Limits) -> list[Session]:
        """The sessions an earlier engine paused to disk, as paused sessions of this one."""
        if self.store is None:
            return []
        entries, self.unreadable = self.store.entries("paused")
        for name, problem in self.unreadable.items():
            logger.error("paused session %s cannot be resumed: %s", name, problem)
        adopted = []
        for entry in entries:
            meta = entry.meta
            if meta.source in self._sessions:
                continue
            own = dataclasses.replace(limits, memory_bytes=meta.memory_bytes or limits.memory_bytes)
            session = self._session(meta.source, None, own, meta.tenant, None, NO_NETWORK)
            session.labels = dict(meta.labels)
            session.pause_state = PauseState(
                paused=meta.mode, at=meta.created_at, entry=entry.path.name, lost=dict(meta.lost)
            )
            session.last_used = time.monotonic()
            self._sessions[meta.source] = session
            adopted.append(session)
        return adopted

    def _session(
        self,
        session_id: str,
        holder: HolderLike | None,
        limits: Limits,
        tenant: str,
        network: SessionNetwork | None,
        policy: SandboxNetwork,
    ) -> Session:
        return Session(
            self._runs,
            session_id,
            holder,
            limits,
            disk_bytes=self._disk_bytes,
            idle_timeout=self._idle_timeout,
            on_close=self.forget,
            tenant=tenant,
            network=network,
            keeper=self.keeper,
            policy=policy,
        )

    async def open(
        self,
        *,
        session_id: str | None,
        limits: Limits,
        tenant: str,
        network: SandboxNetwork = NO_NETWORK,
        spawn_holder: SpawnHolder | None = None,
        snapshot: str | None = None,
    ) -> Session:
        session_id = session_id or secrets.token_urlsafe(16)
        if session_id in self._sessions:
            raise SessionExists(f"session {session_id} already exists")
        entry = None if snapshot is None else self.snapshot(snapshot, tenant)
        network = self._networks.check(network)
        holder, link = await self._respawn(tenant, limits, network, spawn_holder)
        try:
            session = self._session(session_id, holder, limits, tenant, link, network)
        except BaseException:
            holder.close()
            raise
        session.spawn_holder = spawn_holder
        self._sessions[session_id] = session
        if entry is not None:
            try:
                await session.restore(entry)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await session.close()
                raise
        return session

    def snapshot(self, snapshot_id: str, tenant: str) -> Entry:
        """A snapshot of ``tenant``'s; another tenant's reads as missing.

        Raises:
            SnapshotNotFound: no such snapshot of this tenant's.
            SnapshotError: it cannot be read.
        """
        if self.store is None:
            raise SnapshotNotFound(f"no snapshot {snapshot_id!r}: this engine keeps none")
        entry = self.store.get("snapshots", snapshot_id)
        if entry.meta.tenant != tenant:
            raise SnapshotNotFound(f"no snapshot {snapshot_id!r}")
        return entry

    def snapshots(self, tenant: str) -> list[SnapshotMeta]:
        """``tenant``'s snapshots, oldest first."""
        if self.store is None:
            return []
        entries, _bad = self.store.entries("snapshots")
        return [e.meta for e in entries if e.meta.tenant == tenant]

    def delete_snapshot(self, snapshot_id: str, tenant: str) -> bool:
        try:
            self.snapshot(snapshot_id, tenant)
        except SnapshotNotFound:
            return False
        assert self.store is not None
        return self.store.delete("snapshots", snapshot_id)

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
            if session.paused is not None or session.busy or session.last_used >= cutoff:
                continue
            if self.idle_action == "pause":
                try:
                    await session.pause("full")
                except SnapshotError as exc:
                    logger.warning("idle session %s could not pause (%s): closed", session.id, exc)
                    await session.close()
            else:
                await session.close()
        await self.expire_paused()

    async def expire_paused(self) -> None:
        """Close paused sessions past ``paused_ttl``, and each tenant's oldest past
        ``max_paused``; each is logged (the owner sees it gone: 404 on its next call)."""
        paused = sorted(
            (s for s in self._sessions.values() if s.pause_state.at is not None),
            key=lambda s: s.pause_state.at or 0.0,
        )
        now = time.time()
        count: dict[str, int] = {}
        for session in paused:
            count[session.tenant] = count.get(session.tenant, 0) + 1
        for session in paused:
            at = session.pause_state.at or now
            over = count[session.tenant] > self.max_paused
            if over or now - at > self.paused_ttl:
                why = "its key holds too many paused sessions" if over else "paused_ttl passed"
                logger.warning("paused session %s of %s closed: %s", session.id,
                               session.tenant or "(no key)", why)  # fmt: skip
                count[session.tenant] -= 1
                await session.close()

    async def pause_all(self, grace: float) -> dict[str, str]:
        """Pause every running session to disk within ``grace`` seconds (full where the
        interpreter can write its state, else filesystem); returns how each was kept
        ("full", "filesystem" or why not). Nothing happens without a ``paused_dir``."""
        if self.store is None:
            return {}
        kept: dict[str, str] = {}
        with anyio.move_on_after(grace):
            for session in list(self._sessions.values()):
                state = session.pause_state
                if session.closed or not session.keep_on_shutdown:
                    continue
                if state.entry is not None and not state.frozen:
                    continue  # on disk already
                try:
                    kept[session.id] = await session.pause("full", to_disk=True)
                except (SnapshotError, SessionClosed, OSError, WorkerError) as exc:
                    kept[session.id] = f"not kept: {exc}"
                    logger.error("session %s could not be paused at shutdown: %s",
                                 session.id, exc)  # fmt: skip
        for session_id, how in kept.items():
            logger.info("shutdown: session %s kept: %s", session_id, how)
        for session in self._sessions.values():
            state = session.pause_state
            if (
                session.keep_on_shutdown
                and session.id not in kept
                and not (state.entry is not None and not state.frozen)
            ):
                kept[session.id] = "not kept: shutdown_grace passed first"
                logger.error("shutdown: session %s not kept: shutdown_grace passed", session.id)
        return kept

    async def close_all(self) -> None:
        for session in list(self._sessions.values()):
            state = session.pause_state
            if state.entry is not None and not state.frozen:
                self.forget(session.id)  # kept on disk for the next engine
            else:
                await session.close()
