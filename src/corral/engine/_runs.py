"""The one run path that one-shot runs and session runs share.

Validation, evidence, the deadline (queue + start + run), explicit cancellation, the capacity
slot, the request to a worker, the result and the outcome counts happen here, once. What
differs between a fresh worker and a session's interpreter is a :class:`Target`: where the
code executes, what must be held before a slot is taken, and what a stopped run leaves behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc

from corral._limits import Limits
from corral.engine._feed import NO_FEED, Feed, check_feed, fed
from corral.engine._inputs import Input, RunEventSink
from corral.engine._job import Job, request_for, validate_request, watch_cancel
from corral.engine._outcome import build_result
from corral.engine._result import Evidence, ExecutionResult, InputEvidence, Outcome
from corral.engine._scheduler import Scheduler
from corral.engine._stream import OutputListener
from corral.errors import Busy, EngineClosed, WorkerError
from corral.network import NO_NETWORK, SandboxNetwork
from corral.sandbox import SandboxCgroup, Worker, WorkerReport

__all__ = ["SHUTTING_DOWN", "RunOptions", "Runs", "Target", "stop_message"]

logger = logging.getLogger("corral.engine")

SHUTTING_DOWN = "the server is shutting down"


def stop_message(job: Job) -> tuple[Outcome, str]:
    """The outcome and reason of a run its own scope stopped."""
    if job.cancelled_explicitly:
        return "cancelled", job.stop_reason or "the run was cancelled"
    return "timeout", job.stop_reason or f"the run exceeded its {job.limits.timeout:g} s time limit"


class Target(Protocol):
    """Where a run executes: a fresh worker or a session's interpreter."""

    @property
    def holds_slot(self) -> bool:
        """Whether its run takes one of the engine's capacity slots while it runs: a fresh
        worker does; a session's interpreter, already running in a sandbox whose cgroup
        shares the CPU with every other, does not (its runs may wait for I/O or sleep)."""

    def serial(self) -> contextlib.AbstractAsyncContextManager[object]:
        """Held before a capacity slot is taken (a session runs one thing at a time)."""

    def closing(self) -> anyio.Event | None:
        """Set when the target goes away under a run; the run is then cancelled."""

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        """Run the code, holding a slot; infrastructure failures become results."""

    async def interrupted(self, job: Job) -> None:
        """The run ends without a result (deadline, cancel, its caller gone) while the target
        is still held: leave the target fit for the next run."""

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        """The result of a run its own deadline or an explicit cancel stopped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """What one run asks for besides its code: the run path's keywords, resolved once."""

    limits: Limits
    inputs: Sequence[Input] = ()
    """Sources mounted read-only under ``/inputs`` (one-shot runs)."""
    argv: Sequence[str] | None = None
    on_event: RunEventSink | None = None
    on_output: OutputListener | None = None
    cancel: anyio.Event | None = None
    tenant: str = ""
    feed: Feed = NO_FEED
    """stdin and working files, given to a fresh worker before the code starts."""
    queue_timeout: float | None = None
    """Seconds the run may wait for a slot; ``limits.timeout`` then starts once it has one."""
    cwd: str | None = None
    """A session run's working directory inside the sandbox."""
    network: SandboxNetwork = NO_NETWORK
    """What a one-shot run may reach (a session's is the session's own)."""
    admit: bool = True
    """False: run even while the engine drains (a pause's own cells at shutdown)."""


class Runs:
    """The engine's run path: open state, scheduler, outcome counts, evidence, runs in flight."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.runtime = ""
        self.open = False
        self.draining = False
        """Set by ``Engine.drain``: runs in flight go on, new ones are refused."""
        self.outcomes: Counter[str] = Counter()
        self.cpu_ns_by_tenant: Counter[str] = Counter()
        """CPU time of finished one-shot runs and cases by tenant (sessions count their own)."""
        self.task_group: anyio.abc.TaskGroup | None = None
        """The engine's, for work that outlives one call (streamed runs)."""
        self.live: dict[Job, anyio.CancelScope] = {}
        """Runs in flight, with the scope a drain cancels."""
        self._idle = anyio.Event()

    def check_open(self, *, admit: bool = True) -> None:
        """Raises EngineClosed unless running (and, to ``admit`` new work, not draining)."""
        if not self.open:
            raise EngineClosed("the engine is not running (use `async with Engine()`)")
        if admit and self.draining:
            raise EngineClosed(SHUTTING_DOWN)

    @contextlib.contextmanager
    def _tracked(self, job: Job, scope: anyio.CancelScope) -> Iterator[None]:
        self.live[job] = scope
        try:
            yield
        finally:
            del self.live[job]
            if not self.live:
                self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no run is in flight."""
        while self.live:
            if self._idle.is_set():  # spent by an earlier lull; concurrent waiters share one
                self._idle = anyio.Event()
            await self._idle.wait()

    def background(self) -> anyio.abc.TaskGroup:
        """Raises: EngineClosed."""
        self.check_open()
        assert self.task_group is not None
        return self.task_group

    def evidence(self, code: str, inputs: Sequence[Input], limits: Limits) -> Evidence:
        return Evidence(
            code_sha256=hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest(),
            runtime=self.runtime,
            inputs=tuple(InputEvidence(i.id, i.text_sha256, i.original_sha256) for i in inputs),
            limits=limits.as_dict(),
        )

    def _refuse(
        self, outcome: Outcome, message: str, evidence: Evidence, started: float
    ) -> ExecutionResult:
        return ExecutionResult(
            outcome=outcome,
            message=message,
            evidence=evidence,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
        )

    async def run(self, target: Target, code: str, options: RunOptions) -> ExecutionResult:
        """Run ``code`` on ``target`` as ``options`` say; every per-call failure is a result.

        Raises:
            EngineClosed: the engine is not running.
        """
        self.check_open(admit=options.admit)
        inputs, limits, argv, feed = options.inputs, options.limits, options.argv, options.feed
        queue_timeout, tenant = options.queue_timeout, options.tenant
        started = time.perf_counter()
        evidence = self.evidence(code, inputs, limits)
        problem = validate_request(code, inputs, limits, argv) or check_feed(
            feed.stdin, feed.files, limits
        )
        if problem:
            self.outcomes["invalid_input"] += 1
            return self._refuse("invalid_input", problem, evidence, started)
        job = Job(started, limits, options.on_event, options.on_output, argv=argv, tenant=tenant)
        job.feed = feed
        job.cwd = options.cwd
        job.network = options.network
        budget = limits.timeout if queue_timeout is None else queue_timeout
        deadline = anyio.current_time() + budget
        result: ExecutionResult | None = None
        try:
            with anyio.CancelScope(deadline=deadline) as scope, self._tracked(job, scope):
                async with watch_cancel(options.cancel, scope, job, target.closing()):
                    try:
                        async with target.serial():
                            try:
                                slot = (
                                    self.scheduler.slot(on_queued=job.queued, tenant=tenant)
                                    if target.holds_slot
                                    else self.scheduler.beside()
                                )
                                async with slot:
                                    job.admitted()
                                    if queue_timeout is not None:
                                        scope.deadline = anyio.current_time() + limits.timeout
                                    result = await target.execute(job, code, inputs, evidence)
                            finally:
                                if result is None:
                                    # Still holding the target: no other run may meet it
                                    # half-way through this one.
                                    with anyio.CancelScope(shield=True):
                                        await target.interrupted(job)
                    except Busy as exc:
                        result = self._refuse("busy", str(exc), evidence, started)
                    except OSError as exc:
                        # EMFILE, ENFILE, ENOMEM and the like: this run fails, the server goes on.
                        logger.warning("a run failed in the server: %s", exc)
                        message = f"the server could not run it: {exc}"
                        result = self._refuse("worker_error", message, evidence, started)
        except anyio.get_cancelled_exc_class():
            self.outcomes["cancelled"] += 1  # the caller's own scope: it gets no result
            raise
        if result is None and queue_timeout is not None and job.admitted_at is None:
            message = f"no worker became free within {queue_timeout:g} s; try again"
            result = self._refuse("busy", message, evidence, started)
        if result is None:
            result = target.stopped(job, evidence)
        self.outcomes[result.outcome] += 1
        job.finished(result)
        return result

    async def execute_on(
        self, worker: Worker, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        """Send one request to ``worker`` and build the result."""
        job.worker = worker
        request = request_for(
            code, inputs, job.limits, anyio.current_effective_deadline(), job.argv
        )
        request = fed(request, job.feed.stdin, job.feed.files)
        if job.cwd is not None:
            request = dataclasses.replace(request, cwd=job.cwd)
        if inputs:
            files: list[tuple[str, bytes]] = []
            for item in inputs:
                files.append((f"{item.id}.txt", item.text))
                if item.original is not None:
                    files.append((f"{item.id}.orig", item.original))
            try:
                await worker.write_inputs(files, uid=worker.outer_id, gid=worker.outer_id)
            except OSError as exc:
                return job.stopped("invalid_input", f"the inputs do not fit: {exc}", evidence)
        cgroup = worker.cgroup
        if cgroup is not None:
            try:
                cgroup.fit(memory_bytes=job.limits.memory_bytes, pids=job.limits.pids)
            except OSError as exc:
                message = f"the sandbox's limits could not be set: {exc}"
                return job.stopped("worker_error", message, evidence)
            cgroup.begin_run()
        try:
            report: WorkerReport = await worker.execute(
                request, job.capture.stdout, job.capture.stderr, job.executing, job.displayed
            )
        except WorkerError as exc:
            job.drain(worker)
            if await self._out_of_memory(job, cgroup):
                return job.stopped("memory_limit", _memory_message(job.limits), evidence)
            logger.warning("worker %s failed: %s", worker.pid, exc)
            return job.stopped("worker_error", f"the worker failed: {exc}", evidence)
        killed = await self._out_of_memory(job, cgroup)
        try:
            result = build_result(
                "memory_limit" if killed else "ok",
                job.capture,
                job.limits,
                report=report,
                evidence=evidence,
                message=_memory_message(job.limits) if killed else "",
                **job.timing(),
            )
        except WorkerError as exc:
            return job.stopped("worker_error", f"the worker sent a bad report: {exc}", evidence)
        return result

    async def _out_of_memory(self, job: Job, cgroup: SandboxCgroup | None) -> bool:
        """Whether the kernel killed a process of the run's sandbox for memory during the
        run; counts the run's CPU for its tenant on the way."""
        if cgroup is None:
            return False
        kills, cpu_ns = await cgroup.end_run()
        if job.counts_cpu:
            self.cpu_ns_by_tenant[job.tenant] += cpu_ns
        return kills > 0


def _memory_message(limits: Limits) -> str:
    mib = limits.memory_bytes / (1 << 20)
    return (
        f"the run went past its memory limit of {mib:g} MiB (all its processes and the "
        "files it keeps in memory together): the kernel killed a process of it"
    )
