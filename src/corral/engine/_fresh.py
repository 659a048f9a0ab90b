"""Fresh workers: where one-shot runs and case servers get theirs, and the one-shot target.

``FreshWorkers`` is the engine's one worker source: the lean zygote's pool for code that
imports nothing beyond the standard library, the full one's for the rest, a worker made to
measure for another ``/work`` size. ``Lane``, ``Repeats`` and ``FreshRun`` take it as a
``WorkerSource`` (and the run path, ``Runs``), never the engine itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Protocol

import anyio

from corral.engine._inputs import Input
from corral.engine._job import Job
from corral.engine._network import Networks
from corral.engine._result import Evidence, ExecutionResult
from corral.engine._runs import Runs, stop_message
from corral.engine._supply import WorkerSupply, stdlib_only
from corral.errors import NetworkUnavailable, WorkerError
from corral.network import EgressLink
from corral.sandbox import Worker

__all__ = ["FreshRun", "FreshWorkers", "WorkerSource"]


class WorkerSource(Protocol):
    """Hands out fresh, ready one-shot workers."""

    async def take(self, job: Job, evidence: Evidence, *, lean: bool) -> Worker | ExecutionResult:
        """A ready worker for ``job`` (from the lean zygote when ``lean``), or the result
        that says why there is none."""


class FreshWorkers:
    """The engine's zygotes' pools as one worker source."""

    def __init__(self, full: WorkerSupply, lean: WorkerSupply | None, work_bytes: int) -> None:
        self._full = full
        self._lean = lean
        self._work_bytes = work_bytes
        """The size of a pooled worker's ``/work``; another size costs a worker of its own."""

    async def take(self, job: Job, evidence: Evidence, *, lean: bool) -> Worker | ExecutionResult:
        supply = self._lean if lean and self._lean is not None else self._full
        pool, zygote = supply.pool, supply.zygote
        if pool is None or zygote is None:
            reason = supply.failure or "the zygote is restarting"
            return job.stopped("worker_error", f"no worker can be started: {reason}", evidence)
        try:
            if job.limits.work_bytes == self._work_bytes:
                return await pool.take()
            # The size of /work is fixed when a worker is made: pooled ones have the
            # engine's, so another size costs a worker of its own.
            return await zygote.spawn_ready(work_bytes=job.limits.work_bytes)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return job.stopped("worker_error", "the zygote restarted; try again", evidence)
        except (WorkerError, OSError) as exc:
            return job.stopped("worker_error", f"no worker could be started: {exc}", evidence)


class FreshRun:
    """The target of one-shot runs: a fresh worker, closed after the run."""

    def __init__(self, workers: WorkerSource, runs: Runs, networks: Networks) -> None:
        self._workers = workers
        self._runs = runs
        self._networks = networks

    holds_slot = True
    """A fresh worker is a slot's worth of the host (see ``Target.holds_slot``)."""

    def serial(self) -> contextlib.AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    def closing(self) -> anyio.Event | None:
        return None

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        lean = not inputs and stdlib_only(code)
        worker = await self._workers.take(job, evidence, lean=lean)
        if isinstance(worker, ExecutionResult):
            return worker
        link: EgressLink | None = None
        try:
            try:
                link = await self._networks.open(
                    worker.pidfd, job.network, tenant=job.tenant, sandbox=f"run-{worker.pid}"
                )
            except NetworkUnavailable as exc:
                return job.stopped("worker_error", str(exc), evidence)
            return await self._runs.execute_on(worker, job, code, inputs, evidence)
        finally:
            if link is not None:
                link.close()
            job.drain(worker)
            worker.close()

    async def interrupted(self, job: Job) -> None:
        """Nothing to do: ``execute`` closes its worker however it ends."""

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        return job.stopped(*stop_message(job), evidence)
