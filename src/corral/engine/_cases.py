"""Many cases of one program (``/run_code_batch``): each a fresh run, forked from a case server.

A batch runs on at most ``capacity`` lanes. A lane holds one case server (a fresh worker that
compiled the program once and imported what it imports, ``corral.sandbox.inside._cases``) and
runs its share of the cases one after another, each through the engine's one run path
(``Runs.run``): validation, evidence, its own deadline, the fair scheduler's slot, the bounded
reader, the result. A slot is taken per case, so other callers keep their turn between two cases
of a batch, and a case that times out holds its lane for its own timeout only. A case that has
answered gives its slot back at once: its server kills what is left of it, reaps and restores
its folders meanwhile, and only the lane's next case waits for that, before its own slot and
clock start, as the kernel tears a fresh worker down after its slot too. A batch starts with one
lane and opens another whenever one of its cases gets a slot while another stands free with
nobody waiting: alone, a batch uses every worker; among many, each keeps to one lane, and so to
one case server (making one costs a fresh worker and the program's preparation, a few cases'
worth of CPU).

Each case's deadline is the engine's, as for any run: when it passes, the lane stops the case
(the server kills its processes and restores the folders) and the case is ``timeout``. A case
server that fails or misses ``STOP_GRACE`` is killed by its pidfd, the case it was serving
ends ``worker_error``, and the lane's next case gets a new server: a case can cost its own
result, never another's, and never becomes a wrong answer.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from corral._limits import Limits
from corral.engine._feed import Feed
from corral.engine._inputs import Input, RunEvent, RunEventSink
from corral.engine._job import Job
from corral.engine._result import Evidence, ExecutionResult
from corral.engine._runs import RunOptions, Runs, stop_message
from corral.engine._supply import stdlib_only
from corral.errors import EngineClosed, WorkerError
from corral.sandbox import CaseServer, Launch, Worker

if TYPE_CHECKING:
    from corral.engine._fresh import WorkerSource

__all__ = ["STOP_GRACE", "Case", "Lane", "run_cases", "run_on_lane"]

logger = logging.getLogger("corral.engine")

STOP_GRACE = 2.0
"""Seconds a case server has to end a case (kill, reap, restore its folders) and answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One case of ``Engine.run_cases``: its standard input and, when not the batch's, limits."""

    stdin: bytes | None = None
    """The program's standard input, then EOF; None: EOF at once."""
    limits: Limits | None = None


class Lane:
    """The target of a lane's runs: its case server, one case at a time."""

    def __init__(
        self, workers: WorkerSource, runs: Runs, code: str, launch: Launch | None = None
    ) -> None:
        self._workers = workers
        self._runs = runs
        self._code = code
        self._launch = launch
        """For a program that is not Python: its cases exec it, with no driver to run."""
        self._limits: Limits | None = None
        """The limits of the server's cases: a launch server takes them as its own."""
        self._server: CaseServer | None = None
        self._case: Worker | None = None

    @property
    def serving(self) -> bool:
        """Whether its case server is kept for another case."""
        return self._server is not None and not self._server.retired

    def alive(self) -> bool:
        """Whether its case server is kept and its process still there."""
        server = self._server
        return server is not None and not server.retired and not server.worker.exited()

    async def settle(self) -> None:
        """Wait for the server to have cleaned up after the last case (its kill, reap and
        restore run after that case gave back its slot), so that the next case's slot and
        clock start after it: the clean-up is the last case's cost, not the next one's."""
        if self._server is not None:
            await self._server.end_stop(STOP_GRACE)

    holds_slot = True
    """Each case is a fresh process of its server: a slot's worth of the host."""

    def serial(self) -> contextlib.AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    def closing(self) -> anyio.Event | None:
        return None

    async def _open(self, job: Job, evidence: Evidence) -> CaseServer | ExecutionResult:
        worker = await self._workers.take(job, evidence, lean=stdlib_only(self._code))
        if isinstance(worker, ExecutionResult):
            return worker
        server = CaseServer(worker, work_bytes=job.limits.work_bytes)
        try:
            await server.prepare(self._code, self._launch)
        except BaseException as exc:
            server.retire()
            if isinstance(exc, WorkerError):
                return job.stopped("worker_error", f"the case server failed: {exc}", evidence)
            raise
        return server

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        server = self._server
        if server is not None and server.work_bytes != job.limits.work_bytes:
            server.retire()  # its /work was sized when it was made
        if server is not None and self._launch is not None and self._limits != job.limits:
            server.retire()  # it took its first case's limits as its own, for good
        if server is None or server.retired:
            opened = await self._open(job, evidence)
            if isinstance(opened, ExecutionResult):
                return opened
            server = self._server = opened
            self._limits = job.limits
        deadline = anyio.current_effective_deadline()
        seconds = deadline - anyio.current_time() if math.isfinite(deadline) else job.limits.timeout
        try:
            case = self._case = await server.start(max(0.0, seconds))
        except (WorkerError, OSError) as exc:
            server.retire()
            return job.stopped("worker_error", f"the case server failed: {exc}", evidence)
        # The request carries no code: the server compiled it, and evidence names it.
        result = await self._runs.execute_on(case, job, "", inputs, evidence)
        if result.outcome == "worker_error":
            ended = await server.stop(STOP_GRACE)
            if ended is not None and ended.timed_out:
                result = job.stopped(*stop_message(job), evidence)  # the server's timer
        else:
            # The case has answered: the server kills what is left of it, reaps and restores
            # its folders after this run has given back its slot. The lane's next case waits
            # for that (``settle``); nobody else has to, as after a fresh worker's exit.
            await server.begin_stop(STOP_GRACE)
        self._close_case()
        return result

    async def interrupted(self, job: Job) -> None:
        """The case's deadline (or the caller) ended it: stop it, keep what it printed."""
        server, case = self._server, self._case
        if server is not None and case is not None:
            await server.stop(STOP_GRACE)
            job.drain(case)  # every writer is gone now: this reads up to EOF
        self._close_case()

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        return job.stopped(*stop_message(job), evidence)

    def _close_case(self) -> None:
        case, self._case = self._case, None
        if case is not None:
            case.close()

    def close(self) -> None:
        self._close_case()
        if self._server is not None:
            self._server.retire()
            self._server = None


async def run_on_lane(
    runs: Runs,
    lane: Lane,
    code: str,
    feed: Feed,
    *,
    limits: Limits,
    queue_timeout: float | None,
    tenant: str,
    on_event: RunEventSink | None = None,
) -> ExecutionResult:
    """One case on ``lane`` through the engine's one run path (its slot, deadline, result)."""
    await lane.settle()
    options = RunOptions(
        limits=limits, on_event=on_event, tenant=tenant, feed=feed, queue_timeout=queue_timeout
    )
    return await runs.run(lane, code, options)


async def run_cases(
    workers: WorkerSource,
    runs: Runs,
    code: str,
    cases: Sequence[Case],
    *,
    limits: Limits,
    files: Mapping[str, bytes],
    queue_timeout: float | None,
    tenant: str,
    launch: Launch | None = None,
) -> list[ExecutionResult]:
    """Run ``code`` once per case on at most capacity lanes; results in case order (each
    case execs ``launch`` when given: ``code`` is then its driver, only named).

    Once a case finds no worker free in time (``busy``), no further case starts, and every
    case without a result gets that one.

    Raises:
        EngineClosed: the engine is not running, or stopped during the batch.
    """
    runs.check_open()
    results: list[ExecutionResult | None] = [None] * len(cases)
    order: Iterator[int] = iter(range(len(cases)))
    taken = 0
    lanes = 0
    most = max(1, min(runs.scheduler.capacity, len(cases)))
    stop = _Stop()

    def grow(event: RunEvent) -> None:
        """When a case gets its slot and another slot stands free with nobody waiting for it,
        open one more lane: a lone batch comes to use every worker, while one among many
        keeps to one lane (one case server, not one per worker)."""
        nonlocal lanes
        if event.phase != "started" or lanes >= most or taken >= len(cases):
            return
        stats = runs.scheduler.statistics()
        if not stats.queued and stats.running < stats.capacity:
            lanes += 1
            tg.start_soon(lane)

    async def lane() -> None:
        nonlocal taken
        target = Lane(workers, runs, code, launch)
        try:
            for index in order:
                taken += 1
                if stop.busy is not None or stop.closed is not None:
                    return
                case = cases[index]
                try:
                    result = await run_on_lane(
                        runs,
                        target,
                        code,
                        Feed(case.stdin, files),
                        limits=case.limits or limits,
                        queue_timeout=queue_timeout,
                        tenant=tenant,
                        on_event=grow,
                    )
                except EngineClosed as exc:
                    stop.closed = exc
                    return
                results[index] = result
                if result.outcome == "busy" and stop.busy is None:
                    stop.busy = result
        finally:
            target.close()

    async with anyio.create_task_group() as tg:
        lanes = 1
        tg.start_soon(lane)
    if stop.closed is not None:
        raise stop.closed
    return [result if result is not None else _given(stop.busy) for result in results]


@dataclass(slots=True)
class _Stop:
    """Why a batch's lanes start no further case: a case found no worker in time (its
    ``busy`` result is every unstarted case's), or the engine closed."""

    busy: ExecutionResult | None = None
    closed: EngineClosed | None = None


def _given(result: ExecutionResult | None) -> ExecutionResult:
    assert result is not None  # a case is left without a result only after a busy one
    return result
