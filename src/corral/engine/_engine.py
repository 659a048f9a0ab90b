"""The Engine: one process-wide scheduler in front of a supervised zygote and warm pool."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.abc
import anyio.to_thread

import corral
from corral._limits import DEFAULT_LIMITS, Limits
from corral._uids import DEFAULT_UID_RANGE, UidRange
from corral.engine._cases import Case, run_cases
from corral.engine._feed import Feed
from corral.engine._inputs import Input, RunEventSink
from corral.engine._job import Job
from corral.engine._repeats import Repeats
from corral.engine._result import Evidence, ExecutionResult
from corral.engine._runs import SHUTTING_DOWN, Runs, stop_message
from corral.engine._scheduler import Scheduler, SchedulerStatistics
from corral.engine._session import Session, SessionManager
from corral.engine._stream import OutputEvent, OutputListener, iterate
from corral.engine._supervisor import supervise
from corral.engine._supply import WorkerSupply, adopt_data_dir, stdlib_only
from corral.errors import WorkerError, ZygoteUnavailable
from corral.sandbox import DEFAULT_PRELOAD, Holder, WarmPool, Worker, Zygote

__all__ = ["Engine", "EngineStatistics", "SourceItem"]

SourceItem = str | os.PathLike[str] | bytes | tuple[str, bytes]
"""A source for ``Engine.run(sources=...)``: a file's path, its bytes, or (name, bytes)."""

logger = logging.getLogger("corral.engine")

_MEMORY_POKE = 0.1  # seconds between memory-gate re-checks while jobs wait
_CANCEL_GRACE = 5.0  # seconds for cancelled runs to kill their workers and answer


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """A snapshot for /health, /metrics and `corral doctor`."""

    capacity: int
    running: int
    queued: int
    queue_size: int
    pool_size: int
    pool_ready: int
    sessions: int
    zygote_restarts: int
    runs_by_outcome: dict[str, int]
    scheduler: SchedulerStatistics
    unavailable: str = ""
    """Why runs cannot be served now ("" when they can)."""


class Engine:
    """Runs untrusted Python in fresh, isolated workers.

    Use as ``async with Engine() as engine:``; ``run`` returns an ``ExecutionResult`` for every
    per-call failure and raises only ``EngineClosed``.

    For an engine that serves one run (``corral run``): ``pool_size=0`` keeps no spare worker
    ready (each run gets one made for it, the first the start-up probe's), and
    ``prewarm=False`` has the zygote load nothing ahead of that run (IPython's formatter on
    first use, no warm-up of pages many workers would share).
    """

    def __init__(
        self,
        *,
        capacity: int | None = None,
        queue_size: int = 256,
        max_queued_per_tenant: int | None = None,
        pool_size: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        session_idle_timeout: float = 600.0,
        session_disk_bytes: int = 256 * 1024 * 1024,
        min_free_memory: int = 256 * 1024 * 1024,
        lean: bool = True,
        lean_preload: Sequence[str] = (),
        uid_range: tuple[int, int] | UidRange = DEFAULT_UID_RANGE,
        session_data_dir: str | os.PathLike[str] | None = None,
        prewarm: bool = True,
    ) -> None:
        self.capacity = capacity or os.cpu_count() or 1
        self.limits = limits
        self._preload = tuple(preload)
        self._pool_size = pool_size if pool_size is not None else self.capacity
        self._scheduler = Scheduler(
            self.capacity,
            queue_size,
            max_queued_per_tenant=max_queued_per_tenant,
            min_free_memory=min_free_memory,
        )
        self.session_idle_timeout = session_idle_timeout
        self.session_disk_bytes = session_disk_bytes
        uids = uid_range if isinstance(uid_range, UidRange) else UidRange(*uid_range)
        full_uids, lean_uids = uids.split()  # each zygote a block of its own
        # A host folder as every session's /mnt/data (container mode's MOUNT_FOLDER): files
        # outlive the holder, and the folder's own size, not session_disk_bytes, bounds them.
        self._uids = uids
        self._data_dir = None if session_data_dir is None else os.fspath(session_data_dir)
        self._full = WorkerSupply(
            preload, limits, self._pool_size, full_uids, self._data_dir, prewarm=prewarm
        )
        self._lean = (
            WorkerSupply(lean_preload, limits, self._pool_size, lean_uids, prewarm=prewarm)
            if lean
            else None
        )
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        self._runs = Runs(self._scheduler)
        self._fresh = _FreshWorker(self)
        self._repeats = Repeats(self, self._runs)
        self._sessions: SessionManager | None = None

    # lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the zygote and fill the pool.

        Raises:
            IsolationError: this host cannot build the sandbox (see ``corral doctor``).
            ZygoteUnavailable: the zygote did not start.
        """
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        try:
            await self._start_zygote()
        except BaseException:
            self._tg.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._stack = stack
        self._sessions = SessionManager(
            self._runs,
            self._spawn_holder,
            idle_timeout=self.session_idle_timeout,
            disk_bytes=self.session_disk_bytes,
        )
        self._runs.task_group = self._tg
        self._runs.open = True
        self._tg.start_soon(supervise, "the memory gate", self._poke_memory_gate)
        self._tg.start_soon(supervise, "session expiry", self._sessions.expire_loop)
        self._tg.start_soon(supervise, "case server expiry", self._repeats.expire_loop)

    def _supplies(self) -> list[WorkerSupply]:
        return [z for z in (self._full, self._lean) if z is not None]

    async def _start_zygote(self) -> None:
        assert self._tg is not None
        for supply in self._supplies():
            await self._tg.start(supply.run)
        self._scheduler.on_running = self._note_running
        assert self._full.zygote is not None
        hello = self._full.zygote.hello
        versions = "; ".join(f"{k} {v}" for k, v in sorted(hello.get("versions", {}).items()))
        self._runs.runtime = f"corral {corral.__version__}; python {hello.get('python', '?')}" + (
            f"; {versions}" if versions else ""
        )

    def _note_running(self, running: int) -> None:
        for supply in self._supplies():
            supply.set_running(running)

    async def _poke_memory_gate(self) -> None:
        while not self._closing:
            await anyio.sleep(_MEMORY_POKE)
            self._scheduler.poke()

    @property
    def unavailable(self) -> str:
        """Why runs cannot be served now ("" when they can): a zygote is down."""
        return "; ".join(z.failure for z in self._supplies() if z.failure)

    async def drain(self, grace: float) -> None:
        """Stop admitting work, let runs in flight finish within ``grace`` seconds, then
        cancel the rest: they end ``cancelled``, "the server is shutting down". Call it
        before ``aclose`` for a graceful stop."""
        self._runs.draining = True
        with anyio.move_on_after(grace):
            await self._runs.wait_idle()
        for job, scope in list(self._runs.live.items()):
            job.stop_reason = SHUTTING_DOWN
            job.cancelled_explicitly = True
            scope.cancel()
        with anyio.move_on_after(_CANCEL_GRACE):
            await self._runs.wait_idle()

    async def aclose(self) -> None:
        """Stop admitting work, stop sessions and workers, stop the zygote; idempotent."""
        if self._stack is None or self._closing:
            return
        self._closing = True
        self._runs.open = False
        with anyio.CancelScope(shield=True):
            if self._sessions is not None:
                await self._sessions.close_all()
            self._repeats.close_all()
            for supply in self._supplies():
                await supply.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._stack = None

    @property
    def _zygote(self) -> Zygote | None:
        """The full zygote's handle (diagnostics and benchmarks)."""
        return self._full.zygote

    @property
    def _pool(self) -> WarmPool | None:
        return self._full.pool

    def _zygote_handles(self) -> dict[str, Zygote]:
        """Every running zygote's handle by flavour, "full" first (diagnostics and benchmarks)."""
        named = {"full": self._full, "lean": self._lean}
        return {k: z.zygote for k, z in named.items() if z is not None and z.zygote is not None}

    @property
    def running(self) -> bool:
        return self._runs.open

    @property
    def runtime(self) -> str:
        """corral's, Python's and the preloaded libraries' versions, as evidence records them."""
        return self._runs.runtime

    # runs ------------------------------------------------------------------------------

    def evidence(self, code: str, inputs: Sequence[Input], limits: Limits) -> Evidence:
        """What a result for ``code`` records; for callers that refuse a call themselves."""
        return self._runs.evidence(code, inputs, limits)

    async def run(
        self,
        code: str,
        *,
        inputs: Sequence[Input] = (),
        sources: Sequence[SourceItem] = (),
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        on_event: RunEventSink | None = None,
        on_output: OutputListener | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
        stdin: bytes | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
    ) -> ExecutionResult:
        """Run ``code`` once in a fresh worker.

        Args:
            code: Python source; the value of a trailing expression becomes ``result``.
            inputs: sources mounted read-only under ``/inputs``.
            sources: file paths or bytes to mount as further inputs, each also under its base
                name in the working folder; ``corral.Engine`` ingests them with
                ``corral.sources`` (this layer cannot: it sits below it).
            limits: bounds for this call; the engine's default when None.
            argv: ``sys.argv`` for the code (``[FILE, *args]``, which also sets ``__file__``);
                ``["-c"]`` when None.
            on_event: receives metadata-only lifecycle events.
            on_output: receives stdout and stderr chunks and display bundles as they come,
                within the run's ceilings; the result is the same with or without it.
            cancel: set it to stop the run; the result then has outcome ``cancelled``.
            tenant: whose run this is (an API key's owner, an MCP session): waiting runs of
                several tenants share the workers fairly.
            stdin: the program's standard input, then EOF; None: EOF at once, and ``input()``
                fails saying there is no stdin.
            files: relative path to content, written into the working folder first.
            queue_timeout: seconds the run may wait for a worker; the run's own
                ``limits.timeout`` then starts once it has one. A run still waiting then has
                outcome ``busy``. None: queue, start and run share ``limits.timeout``.

        Raises:
            EngineClosed: the engine is not running (or is draining).
            SourceError: a source could not be ingested (``corral.Engine`` only).
            OSError: a source path could not be read.
            TypeError: ``sources`` on an engine that cannot ingest them, or ``stdin``
                that is not bytes.
        """
        self._runs.check_open()
        if sources:
            inputs = (*inputs, *await anyio.to_thread.run_sync(self._ingest, tuple(sources)))
        return await self._runs.run(
            self._fresh,
            code,
            inputs=inputs,
            limits=limits or self.limits,
            argv=argv,
            on_event=on_event,
            on_output=on_output,
            cancel=cancel,
            tenant=tenant,
            feed=Feed(stdin, files or {}),
            queue_timeout=queue_timeout,
        )

    async def run_cases(
        self,
        code: str,
        cases: Sequence[Case],
        *,
        limits: Limits | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        tenant: str = "",
    ) -> list[ExecutionResult]:
        """Run ``code`` once per case, each case a fresh isolated run; results in case order.

        Cheaper than a ``run`` per case: the cases fork from case servers that compiled the
        code once and imported its standard-library imports (``corral.engine._cases``), on
        at most ``capacity`` of them, each case taking a slot of the fair scheduler.

        Args:
            code: the program every case runs.
            cases: each case's stdin and, when not ``limits``, its own limits.
            limits: the cases' bounds; the engine's default when None.
            files: relative path to content, written into each case's working folder.
            queue_timeout: seconds each case may wait for a slot (as for ``run``).
            tenant: whose cases these are, for the fair scheduler.

        Raises:
            EngineClosed: the engine is not running (or is draining).
        """
        return await run_cases(
            self,
            self._runs,
            code,
            cases,
            limits=limits or self.limits,
            files=files or {},
            queue_timeout=queue_timeout,
            tenant=tenant,
        )

    async def run_case(
        self,
        code: str,
        case: Case,
        *,
        limits: Limits | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        tenant: str = "",
    ) -> ExecutionResult:
        """Run ``code`` once on ``case``: one test case of a program the caller runs many
        times, each call on its own (``/run_code``, one request per test case).

        The result is what ``run`` gives. The first call of a program runs in a fresh
        worker; calls that repeat it (the same code from the same tenant within
        ``REPEAT_WINDOW`` seconds) fork from case servers kept for it, as the cases of
        ``run_cases`` do (``corral.engine._repeats``).

        Args:
            code: the program.
            case: its standard input and, when not ``limits``, its own limits.
            limits: the run's bounds; the engine's default when None.
            files: relative path to content, written into the working folder first.
            queue_timeout: seconds the call may wait for a worker (as for ``run``).
            tenant: whose call this is: case servers are never shared between tenants.

        Raises:
            EngineClosed: the engine is not running (or is draining).
        """
        self._runs.check_open()
        return await self._repeats.run(
            code,
            case,
            limits=limits or self.limits,
            files=files or {},
            queue_timeout=queue_timeout,
            tenant=tenant,
        )

    def stream(
        self,
        code: str,
        *,
        inputs: Sequence[Input] = (),
        sources: Sequence[SourceItem] = (),
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        on_event: RunEventSink | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
    ) -> AsyncGenerator[OutputEvent | ExecutionResult, None]:
        """Run ``code`` as ``run`` does; yield its OutputEvents, then its ExecutionResult.

        Leaving the loop early cancels the run.

        Raises:
            EngineClosed: the engine is not running, or stopped during the run.
        """

        def start(listener: OutputListener, stop: anyio.Event) -> Awaitable[ExecutionResult]:
            return self.run(
                code, inputs=inputs, sources=sources, limits=limits, argv=argv,
                on_event=on_event, cancel=stop, on_output=listener, tenant=tenant,
            )  # fmt: skip

        return iterate(self._background(), start, cancel)

    def _background(self) -> anyio.abc.TaskGroup:
        """The engine's task group, for work that outlives one call (streamed runs).

        Raises:
            EngineClosed: the engine is not running.
        """
        return self._runs.background()

    def _ingest(self, sources: Sequence[SourceItem]) -> list[Input]:
        """Inputs for ``run(sources=...)``; ``corral.Engine`` overrides this with ingestion."""
        raise TypeError(
            "corral.engine.Engine cannot ingest sources (corral.sources sits above it): "
            "use corral.Engine, or pass inputs= built with corral.sources"
        )

    # sessions ----------------------------------------------------------------------------

    async def open_session(
        self, *, session_id: str | None = None, limits: Limits | None = None
    ) -> Session:
        """Open a stateful session backed by a persistent isolated worker.

        Raises:
            EngineClosed: the engine is not running.
            SessionExists: ``session_id`` is taken.
        """
        self._runs.check_open()
        assert self._sessions is not None
        return await self._sessions.open(session_id=session_id, limits=limits or self.limits)

    def get_session(self, session_id: str) -> Session:
        """Raises: SessionNotFound."""
        self._runs.check_open(admit=False)
        assert self._sessions is not None
        return self._sessions.get(session_id)

    def sessions(self) -> list[Session]:
        return [] if self._sessions is None else self._sessions.all()

    async def _spawn_holder(self) -> Holder:
        zygote = self._full.zygote
        if zygote is None:
            raise ZygoteUnavailable("no zygote")
        holder = await zygote.spawn_holder(self.session_disk_bytes)
        if self._data_dir is not None:
            # Before any code runs: the folder, and what earlier sessions left, become this
            # session's own uid's (each session has one of its own).
            try:
                await anyio.to_thread.run_sync(
                    adopt_data_dir, self._data_dir, holder.outer_id, self._uids
                )
            except BaseException:
                holder.kill()
                holder.close()
                raise
        return holder

    async def _take_worker(
        self, job: Job, evidence: Evidence, *, lean: bool
    ) -> Worker | ExecutionResult:
        """A ready one-shot worker for ``job`` (from the lean zygote when ``lean``), or the
        result that says why there is none."""
        supply = self._lean if lean and self._lean is not None else self._full
        pool, zygote = supply.pool, supply.zygote
        if pool is None or zygote is None:
            reason = supply.failure or "the zygote is restarting"
            return job.stopped("worker_error", f"no worker can be started: {reason}", evidence)
        try:
            if job.limits.work_bytes == self.limits.work_bytes:
                return await pool.take()
            # The size of /work is fixed when a worker is made: pooled ones have the
            # engine's, so another size costs a worker of its own.
            return await zygote.spawn_ready(work_bytes=job.limits.work_bytes)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return job.stopped("worker_error", "the zygote restarted; try again", evidence)
        except (WorkerError, OSError) as exc:
            return job.stopped("worker_error", f"no worker could be started: {exc}", evidence)

    def statistics(self) -> EngineStatistics:
        pools = [z.pool.statistics() for z in self._supplies() if z.pool is not None]
        sched = self._scheduler.statistics()
        return EngineStatistics(
            capacity=sched.capacity,
            running=sched.running,
            queued=sched.queued,
            queue_size=sched.queue_size,
            pool_size=sum(p.size for p in pools),
            pool_ready=sum(p.ready for p in pools),
            sessions=len(self.sessions()),
            zygote_restarts=sum(z.restarts for z in self._supplies()),
            runs_by_outcome=dict(self._runs.outcomes),
            scheduler=sched,
            unavailable=self.unavailable,
        )


class _FreshWorker:
    """The target of one-shot runs: a fresh worker from a pool, closed after the run."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def serial(self) -> contextlib.AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    def closing(self) -> anyio.Event | None:
        return None

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        engine = self._engine
        worker = await engine._take_worker(job, evidence, lean=not inputs and stdlib_only(code))
        if isinstance(worker, ExecutionResult):
            return worker
        try:
            return await engine._runs.execute_on(worker, job, code, inputs, evidence)
        finally:
            job.drain(worker)
            worker.close()

    async def interrupted(self, job: Job) -> None:
        """Nothing to do: ``execute`` closes its worker however it ends."""

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        return job.stopped(*stop_message(job), evidence)
