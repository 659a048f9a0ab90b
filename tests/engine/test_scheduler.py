"""The process-wide scheduler: capacity, FIFO order, busy, cancellation, memory gate."""

from __future__ import annotations

import contextlib

import anyio
import pytest

from corral.engine._scheduler import Scheduler, memory_available_bytes
from corral.errors import Busy, EngineError

pytestmark = pytest.mark.anyio


class Job:
    """One scheduler client whose steps the test drives with events."""

    def __init__(self, scheduler: Scheduler, name: str, admitted: list[str]) -> None:
        self.scheduler = scheduler
        self.name = name
        self.admitted = admitted
        self.queued = anyio.Event()
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.busy = False
        self.scope = anyio.CancelScope()

    def _on_queued(self) -> None:
        self.queued.set()

    async def run(self) -> None:
        with self.scope:
            try:
                async with self.scheduler.slot(on_queued=self._on_queued):
                    self.admitted.append(self.name)
                    self.entered.set()
                    await self.release.wait()
            except Busy:
                self.busy = True
                self.queued.set()


async def _start(tg: anyio.abc.TaskGroup, job: Job, *, queues: bool) -> None:
    tg.start_soon(job.run)
    with anyio.fail_after(5):
        await (job.queued if queues else job.entered).wait()


def test_busy_is_an_engine_error() -> None:
    assert issubclass(Busy, EngineError)


def test_rejects_impossible_sizes() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Scheduler(0, 1)
    with pytest.raises(ValueError, match="queue_size"):
        Scheduler(1, -1)


async def test_runs_up_to_capacity_at_once() -> None:
    scheduler = Scheduler(2, 10)
    admitted: list[str] = []
    jobs = [Job(scheduler, name, admitted) for name in "abc"]
    async with anyio.create_task_group() as tg:
        await _start(tg, jobs[0], queues=False)
        await _start(tg, jobs[1], queues=False)
        await _start(tg, jobs[2], queues=True)
        stats = scheduler.statistics()
        assert (stats.running, stats.queued) == (2, 1)
        jobs[0].release.set()
        with anyio.fail_after(5):
            await jobs[2].entered.wait()
        for job in jobs:
            job.release.set()
    assert admitted == ["a", "b", "c"]
    stats = scheduler.statistics()
    assert (stats.running, stats.queued, stats.admitted) == (0, 0, 3)


async def test_queued_jobs_are_admitted_in_arrival_order() -> None:
    scheduler = Scheduler(1, 10)
    admitted: list[str] = []
    first = Job(scheduler, "first", admitted)
    waiting = [Job(scheduler, str(i), admitted) for i in range(6)]
    async with anyio.create_task_group() as tg:
        await _start(tg, first, queues=False)
        for job in waiting:
            await _start(tg, job, queues=True)
        assert scheduler.waiting == 6
        # Release in reverse order of arrival: admission still follows arrival.
        for job in (first, *reversed(waiting)):
            job.release.set()
    assert admitted == ["first", "0", "1", "2", "3", "4", "5"]


async def test_a_new_job_never_overtakes_the_queue() -> None:
    scheduler = Scheduler(1, 10)
    admitted: list[str] = []
    first, second, late = (Job(scheduler, n, admitted) for n in ("first", "second", "late"))
    async with anyio.create_task_group() as tg:
        await _start(tg, first, queues=False)
        await _start(tg, second, queues=True)
        first.release.set()
        # "late" arrives while "second" is granted but has not yet run: it must queue.
        await _start(tg, late, queues=True)
        second.release.set()
        late.release.set()
    assert admitted == ["first", "second", "late"]


async def test_busy_when_the_queue_is_full() -> None:
    scheduler = Scheduler(1, 2)
    admitted: list[str] = []
    jobs = [Job(scheduler, str(i), admitted) for i in range(4)]
    async with anyio.create_task_group() as tg:
        await _start(tg, jobs[0], queues=False)
        await _start(tg, jobs[1], queues=True)
        await _start(tg, jobs[2], queues=True)
        await _start(tg, jobs[3], queues=True)  # refused at once, never queued
        assert jobs[3].busy
        assert not jobs[1].busy
        assert not jobs[2].busy
        assert scheduler.statistics().rejected_busy == 1
        for job in jobs:
            job.release.set()
    assert admitted == ["0", "1", "2"]


async def test_zero_queue_means_busy_whenever_all_slots_are_taken() -> None:
    scheduler = Scheduler(1, 0)
    admitted: list[str] = []
    first, second = Job(scheduler, "first", admitted), Job(scheduler, "second", admitted)
    async with anyio.create_task_group() as tg:
        await _start(tg, first, queues=False)
        await _start(tg, second, queues=True)
        assert second.busy
        first.release.set()
    assert admitted == ["first"]


async def test_cancelling_a_queued_job_removes_it_and_it_never_starts() -> None:
    scheduler = Scheduler(1, 10)
    admitted: list[str] = []
    first, doomed, after = (Job(scheduler, n, admitted) for n in ("first", "doomed", "after"))
    async with anyio.create_task_group() as tg:
        await _start(tg, first, queues=False)
        await _start(tg, doomed, queues=True)
        await _start(tg, after, queues=True)
        doomed.scope.cancel()
        with anyio.fail_after(5):
            while scheduler.waiting != 1:  # the cancelled waiter leaves the queue
                await anyio.lowlevel.checkpoint()
        first.release.set()
        with anyio.fail_after(5):
            await after.entered.wait()
        after.release.set()
    assert admitted == ["first", "after"]
    assert not doomed.entered.is_set()
    stats = scheduler.statistics()
    assert (stats.running, stats.queued, stats.admitted) == (0, 0, 2)


async def test_a_job_cancelled_as_it_is_granted_hands_its_slot_on() -> None:
    scheduler = Scheduler(1, 10)
    admitted: list[str] = []
    doomed, after = Job(scheduler, "doomed", admitted), Job(scheduler, "after", admitted)
    async with anyio.create_task_group() as tg:
        holder = contextlib.AsyncExitStack()
        await holder.enter_async_context(scheduler.slot())
        await _start(tg, doomed, queues=True)
        await _start(tg, after, queues=True)
        # Grant "doomed" and cancel it before its task runs again: it must not resurrect,
        # and its slot goes to the next in line.
        await holder.aclose()
        doomed.scope.cancel()
        with anyio.fail_after(5):
            await after.entered.wait()
        after.release.set()
    assert admitted == ["after"]
    assert not doomed.entered.is_set()
    assert scheduler.statistics().running == 0


async def test_memory_gate_holds_jobs_until_memory_is_available() -> None:
    free = [10**10]
    scheduler = Scheduler(4, 10, min_free_memory=1000, memory_probe=lambda: free[0])
    admitted: list[str] = []
    first, second = Job(scheduler, "first", admitted), Job(scheduler, "second", admitted)
    async with anyio.create_task_group() as tg:
        await _start(tg, first, queues=False)
        free[0] = 999
        await _start(tg, second, queues=True)  # a slot is free, memory is not
        assert scheduler.statistics().memory_waits >= 1
        scheduler.poke()
        assert not second.entered.is_set()
        free[0] = 1000
        scheduler.poke()
        with anyio.fail_after(5):
            await second.entered.wait()
        first.release.set()
        second.release.set()
    assert admitted == ["first", "second"]


async def test_memory_gate_lets_one_job_through_when_nothing_runs() -> None:
    # With nothing running, waiting cannot free memory: the job is admitted anyway.
    scheduler = Scheduler(2, 10, min_free_memory=1000, memory_probe=lambda: 0)
    admitted: list[str] = []
    only = Job(scheduler, "only", admitted)
    async with anyio.create_task_group() as tg:
        await _start(tg, only, queues=False)
        only.release.set()
    assert admitted == ["only"]


async def test_memory_gate_trusts_a_probe_that_does_not_know() -> None:
    scheduler = Scheduler(2, 10, min_free_memory=1000, memory_probe=lambda: None)
    admitted: list[str] = []
    first, second = Job(scheduler, "first", admitted), Job(scheduler, "second", admitted)
    async with anyio.create_task_group() as tg:
        await _start(tg, first, queues=False)
        await _start(tg, second, queues=False)
        first.release.set()
        second.release.set()
    assert admitted == ["first", "second"]


def test_memory_probe_reads_this_host() -> None:
    available = memory_available_bytes()
    assert available is None or available > 0
