"""The Engine: one process-wide scheduler in front of a supervised zygote and warm pool."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc

import corral
from corral._limits import DEFAULT_LIMITS, Limits
from corral.engine._inputs import Input, RunEventSink
from corral.engine._job import Job, cancel_on, request_for, validate_request
from corral.engine._outcome import build_result
from corral.engine._result import Evidence, ExecutionResult, InputEvidence, Outcome
from corral.engine._scheduler import Scheduler, SchedulerStatistics
from corral.engine._session import Session, SessionManager
from corral.errors import Busy, EngineClosed, IsolationError, WorkerError, ZygoteUnavailable
from corral.sandbox import (
    DEFAULT_PRELOAD,
    Holder,
    WarmPool,
    Worker,
    WorkerReport,
    ZygoteHost,
    doctor,
)

__all__ = ["Engine", "EngineStatistics"]

logger = logging.getLogger("corral.engine")

SANDBOX_OUTER_ID = 65534  # the host uid and gid every worker runs as
_RESTART_BACKOFF = 0.5  # seconds between zygote restarts, so a broken host cannot spin
_MEMORY_POKE = 0.1  # seconds between memory-gate re-checks while jobs wait


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


async def _probe(host: ZygoteHost) -> None:
    """Refuse to start unless one worker can be built: a host without user namespaces (say)
    must fail here, with a reason, rather than time out every run later."""
    try:
        worker = await host.spawn()
        try:
            await worker.wait_ready()
        finally:
            worker.close()
    except WorkerError as exc:
        await host.aclose()
        raise IsolationError(
            f"cannot start an isolated worker ({exc}); `corral doctor` shows what is missing"
        ) from exc


class Engine:
    """Runs untrusted Python in fresh, isolated workers.

    Use as ``async with Engine() as engine:``; ``run`` returns an ``ExecutionResult`` for every
    per-call failure and raises only ``EngineClosed``.
    """

    def __init__(
        self,
        *,
        capacity: int | None = None,
        queue_size: int = 256,
        pool_size: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        data_dir: str | os.PathLike[str] | None = None,
        session_idle_timeout: float = 600.0,
        session_disk_bytes: int = 256 * 1024 * 1024,
        min_free_memory: int = 256 * 1024 * 1024,
    ) -> None:
        self.capacity = capacity or os.cpu_count() or 1
        self.limits = limits
        self._preload = tuple(preload)
        self._pool_size = pool_size if pool_size is not None else self.capacity
        self._scheduler = Scheduler(self.capacity, queue_size, min_free_memory=min_free_memory)
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.session_idle_timeout = session_idle_timeout
        self.session_disk_bytes = session_disk_bytes
        self._host: ZygoteHost | None = None
        self._pool: WarmPool | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        self._restarts = 0
        self._outcomes: Counter[str] = Counter()
        self.runtime = ""
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
        self._sessions = SessionManager(self)
        self._tg.start_soon(self._supervise)
        self._tg.start_soon(self._sessions.expire_loop)

    async def _start_zygote(self) -> None:
        assert self._tg is not None
        limits = self.limits
        host = ZygoteHost(
            preload=self._preload,
            max_file_bytes=limits.max_file_bytes,
            static={
                "work_bytes": limits.work_bytes,
                "pids": limits.pids,
                "file_bytes": limits.file_bytes,
                "open_files": limits.open_files,
            },
        )
        try:
            await host.start(self._tg)
            await _probe(host)
        except IsolationError as exc:
            problems = "; ".join((await anyio.to_thread.run_sync(doctor)).problems)
            if not problems:
                raise
            raise IsolationError(f"{exc}. corral doctor: {problems}") from exc
        pool = WarmPool(host, self._pool_size)
        self._scheduler.on_running = pool.set_running
        await pool.run(self._tg)
        self._host, self._pool = host, pool
        hello = host.hello
        versions = "; ".join(f"{k} {v}" for k, v in sorted(hello.get("versions", {}).items()))
        self.runtime = f"corral {corral.__version__}; python {hello.get('python', '?')}" + (
            f"; {versions}" if versions else ""
        )

    async def _supervise(self) -> None:
        while not self._closing:
            host = self._host
            assert host is not None
            with anyio.move_on_after(_MEMORY_POKE):
                await host.dead.wait()
            self._scheduler.poke()
            if not host.dead.is_set() or self._closing:
                continue
            logger.error("zygote %s died; restarting it", host.pid)
            if self._pool is not None:
                self._pool.close()
            await host.aclose()
            self._restarts += 1
            while not self._closing:
                try:
                    await self._start_zygote()
                    break
                except WorkerError:
                    logger.exception("zygote restart failed")
                    await anyio.sleep(_RESTART_BACKOFF)

    async def aclose(self) -> None:
        """Stop admitting work, stop sessions and workers, stop the zygote; idempotent."""
        if self._stack is None or self._closing:
            return
        self._closing = True
        with anyio.CancelScope(shield=True):
            if self._sessions is not None:
                await self._sessions.close_all()
            if self._pool is not None:
                self._pool.close()
            if self._host is not None:
                await self._host.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._stack = None

    @property
    def running(self) -> bool:
        return self._stack is not None and not self._closing

    def _check_open(self) -> None:
        if not self.running:
            raise EngineClosed("the engine is not running (use `async with Engine()`)")

    # runs ------------------------------------------------------------------------------

    def evidence(self, code: str, inputs: Sequence[Input], limits: Limits) -> Evidence:
        return Evidence(
            code_sha256=hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest(),
            runtime=self.runtime,
            inputs=tuple(InputEvidence(i.id, i.text_sha256, i.original_sha256) for i in inputs),
            limits=limits.as_dict(),
        )

    def refuse(
        self, outcome: Outcome, message: str, evidence: Evidence, started: float
    ) -> ExecutionResult:
        """A result for a run that never reached a worker (not yet counted)."""
        return ExecutionResult(
            outcome=outcome,
            message=message,
            evidence=evidence,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
        )

    async def run(
        self,
        code: str,
        *,
        inputs: Sequence[Input] = (),
        limits: Limits | None = None,
        on_event: RunEventSink | None = None,
        cancel: anyio.Event | None = None,
    ) -> ExecutionResult:
        """Run ``code`` once in a fresh worker.

        Args:
            code: Python source; the value of a trailing expression becomes ``result``.
            inputs: sources mounted read-only under ``/inputs``.
            limits: bounds for this call; the engine's default when None.
            on_event: receives metadata-only lifecycle events.
            cancel: set it to stop the run; the result then has outcome ``cancelled``.

        Raises:
            EngineClosed: the engine is not running.
        """
        self._check_open()
        limits = limits or self.limits
        started = time.perf_counter()
        evidence = self.evidence(code, inputs, limits)
        problem = validate_request(code, inputs, limits)
        if problem:
            self._outcomes["invalid_input"] += 1
            return self.refuse("invalid_input", problem, evidence, started)
        job = Job(started, limits, on_event)
        deadline = anyio.current_time() + limits.timeout
        result: ExecutionResult | None = None
        try:
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope(deadline=deadline) as scope:
                    if cancel is not None:
                        tg.start_soon(cancel_on, cancel, scope, job)
                    try:
                        async with self._scheduler.slot(on_queued=job.queued):
                            job.admitted()
                            result = await self._one_shot(job, code, inputs, evidence)
                    except Busy as exc:
                        result = self.refuse("busy", str(exc), evidence, started)
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            self._outcomes["cancelled"] += 1  # the caller's own scope: it gets no result
            raise
        if result is None:
            outcome: Outcome = "cancelled" if job.cancelled_explicitly else "timeout"
            message = (
                "the run was cancelled"
                if outcome == "cancelled"
                else f"the run exceeded its {limits.timeout:g} s time limit"
            )
            result = job.stopped(outcome, message, evidence)
        self._outcomes[result.outcome] += 1
        job.finished(result)
        return result

    async def _one_shot(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        pool, host = self._pool, self._host
        if pool is None or host is None:
            raise EngineClosed("the engine has no worker pool")
        try:
            if job.limits.work_bytes == self.limits.work_bytes:
                worker = await pool.take()
            else:
                # The size of /work is fixed when a worker is made: pooled ones have the
                # engine's, so another size costs a worker of its own.
                worker = await host.spawn(work_bytes=job.limits.work_bytes)
                try:
                    await worker.wait_ready()
                except BaseException:
                    worker.close()
                    raise
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return job.stopped("worker_error", "the zygote restarted; try again", evidence)
        except WorkerError as exc:
            return job.stopped("worker_error", f"no worker could be started: {exc}", evidence)
        try:
            return await self.execute_on(worker, job, code, inputs, evidence, session=False)
        finally:
            job.drain(worker)
            worker.close()

    async def execute_on(
        self,
        worker: Worker,
        job: Job,
        code: str,
        inputs: Sequence[Input],
        evidence: Evidence,
        *,
        session: bool,
    ) -> ExecutionResult:
        """Send one request to ``worker`` and build the result (shared with sessions)."""
        job.worker = worker
        request = request_for(code, inputs, job.limits, anyio.current_effective_deadline())
        if inputs:
            files: list[tuple[str, bytes]] = []
            for item in inputs:
                files.append((f"{item.id}.txt", item.text))
                if item.original is not None:
                    files.append((f"{item.id}.orig", item.original))
            try:
                worker.write_inputs(files, uid=SANDBOX_OUTER_ID, gid=SANDBOX_OUTER_ID)
            except OSError as exc:
                return job.stopped("invalid_input", f"the inputs do not fit: {exc}", evidence)
        try:
            report: WorkerReport = await worker.execute(
                request, job.capture.stdout, job.capture.stderr, job.executing
            )
        except WorkerError as exc:
            job.drain(worker)
            logger.warning("worker %s failed: %s", worker.pid, exc)
            return job.stopped("worker_error", f"the worker failed: {exc}", evidence)
        try:
            return build_result(
                "ok",
                job.capture,
                job.limits,
                report=report.done,
                contents=report.contents,
                evidence=evidence,
                **job.timing(),
            )
        except WorkerError as exc:
            return job.stopped("worker_error", f"the worker sent a bad report: {exc}", evidence)

    # sessions ----------------------------------------------------------------------------

    async def open_session(
        self, *, session_id: str | None = None, limits: Limits | None = None
    ) -> Session:
        """Open a stateful session backed by a persistent isolated worker.

        Raises:
            EngineClosed: the engine is not running.
        """
        self._check_open()
        assert self._sessions is not None
        return await self._sessions.open(session_id=session_id, limits=limits or self.limits)

    def get_session(self, session_id: str) -> Session:
        """Raises: SessionNotFound."""
        self._check_open()
        assert self._sessions is not None
        return self._sessions.get(session_id)

    def sessions(self) -> list[Session]:
        return [] if self._sessions is None else self._sessions.all()

    async def spawn_holder(self) -> Holder:
        """A session holder from the current zygote.

        Raises:
            ZygoteUnavailable: no zygote is running.
        """
        if self._host is None:
            raise ZygoteUnavailable("no zygote")
        return await self._host.spawn_holder(self.session_disk_bytes)

    def forget_session(self, session_id: str) -> None:
        if self._sessions is not None:
            self._sessions.forget(session_id)

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    def count_outcome(self, outcome: str) -> None:
        self._outcomes[outcome] += 1

    def statistics(self) -> EngineStatistics:
        pool = self._pool.statistics() if self._pool is not None else None
        sched = self._scheduler.statistics()
        return EngineStatistics(
            capacity=sched.capacity,
            running=sched.running,
            queued=sched.queued,
            queue_size=sched.queue_size,
            pool_size=self._pool_size,
            pool_ready=pool.ready if pool else 0,
            sessions=len(self.sessions()),
            zygote_restarts=self._restarts,
            runs_by_outcome=dict(self._outcomes),
            scheduler=sched,
        )
