"""One process-wide scheduler: a capacity of running workers, a bounded queue shared fairly
between tenants, and a memory-pressure gate.

When a slot frees and several tenants (API keys, MCP sessions) wait, it goes to the tenant
with the fewest runs going; among equals, to the one served least recently (round robin),
then the longest waiting; within a tenant, runs start in arrival order. So one tenant's
many streams take turns with another's instead of holding every worker, and a per-tenant
bound on waiting runs keeps one tenant from filling the queue.

A queued job that is cancelled leaves the queue before it is granted, so it never starts
later; one granted at the moment it was cancelled hands its slot straight on.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from corral.engine._waiters import WaitQueue
from corral.errors import Busy

__all__ = ["Scheduler", "SchedulerStatistics", "memory_available_bytes"]


def memory_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where the kernel does not say."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    capacity: int
    running: int
    queued: int
    queue_size: int
    admitted: int
    rejected_busy: int
    memory_waits: int
    tenants_waiting: int = 0
    max_queued_per_tenant: int = 0
    session_runs: int = 0
    """Runs going in sessions with a cgroup of their own, which take no slot."""


class Scheduler:
    """Grants run slots fairly between tenants, in arrival order within each."""

    def __init__(
        self,
        capacity: int,
        queue_size: int,
        *,
        max_queued_per_tenant: int | None = None,
        min_free_memory: int = 0,
        memory_probe: Callable[[], int | None] = memory_available_bytes,
    ) -> None:
        if capacity < 1 or queue_size < 0:
            raise ValueError("capacity must be >= 1 and queue_size >= 0")
        self.capacity = capacity
        self.queue_size = queue_size
        self.max_queued_per_tenant = (
            queue_size if max_queued_per_tenant is None else max_queued_per_tenant
        )
        self._min_free = min_free_memory
        self._probe = memory_probe
        self._running = 0
        self._beside = 0
        self.on_running: Callable[[int], None] | None = None
        """Told the number of running jobs whenever it changes (the warm pool listens)."""
        self._queues: dict[str, WaitQueue[None]] = {}
        """Each waiting tenant's line; a tenant leaves when its line empties."""
        self._by_tenant: Counter[str] = Counter()
        self._last_grant: dict[str, int] = {}
        self._seq = itertools.count()
        self._admitted = 0
        self._busy = 0
        self._memory_waits = 0

    def _memory_ok(self) -> bool:
        if not self._min_free or self._running == 0:
            return True  # with nothing running, waiting cannot free memory: let one through
        available = self._probe()
        if available is None or available >= self._min_free:
            return True
        self._memory_waits += 1
        return False

    def _next_tenant(self) -> str:
        """The waiting tenant with the fewest runs going, then the least recently served,
        then the longest waiting."""

        def rank(tenant: str) -> tuple[int, int, int]:
            served = self._last_grant.get(tenant, -1)
            return self._by_tenant[tenant], served, self._queues[tenant].first_arrival

        return min(self._queues, key=rank)

    def _grant_waiting(self) -> None:
        while self._queues and self._running < self.capacity and self._memory_ok():
            tenant = self._next_tenant()
            self._queues[tenant].grant(None)
            self._leave_if_empty(tenant)
            self._take(tenant)

    def _leave_if_empty(self, tenant: str) -> None:
        queue = self._queues.get(tenant)
        if queue is not None and not queue:
            del self._queues[tenant]
            if tenant not in self._by_tenant:
                self._last_grant.pop(tenant, None)

    def _take(self, tenant: str) -> None:
        self._last_grant[tenant] = next(self._seq)
        self._by_tenant[tenant] += 1
        self._set_running(self._running + 1)

    def _set_running(self, running: int) -> None:
        self._running = running
        if self.on_running is not None:
            self.on_running(running)

    def _release(self, tenant: str) -> None:
        self._by_tenant[tenant] -= 1
        if not self._by_tenant[tenant]:
            del self._by_tenant[tenant]
            if tenant not in self._queues:
                del self._last_grant[tenant]  # no claim left: keep memory to active tenants
        self._set_running(self._running - 1)
        self._grant_waiting()

    def poke(self) -> None:
        """Re-check the memory gate (called periodically while jobs wait)."""
        self._grant_waiting()

    @asynccontextmanager
    async def slot(
        self, on_queued: Callable[[], None] | None = None, *, tenant: str = ""
    ) -> AsyncIterator[None]:
        """Hold one of ``capacity`` slots for the body.

        Args:
            on_queued: called if the job has to wait.
            tenant: whose run this is (an API key's owner, an MCP session); "" is one
                anonymous tenant.

        Raises:
            Busy: the queue already holds ``queue_size`` jobs, or ``tenant`` already has
                ``max_queued_per_tenant`` waiting.
        """
        if not self._queues and self._running < self.capacity and self._memory_ok():
            self._take(tenant)
        else:
            if self.waiting >= self.queue_size:
                self._busy += 1
                raise Busy(f"run queue full ({self.queue_size} waiting)")
            mine = self._queues.get(tenant)
            if mine is not None and len(mine) >= self.max_queued_per_tenant:
                self._busy += 1
                raise Busy(f"too many runs waiting for this caller ({len(mine)})")
            if mine is None:
                mine = self._queues[tenant] = WaitQueue()
            try:
                # Granted and cancelled in the same tick: the slot goes to the next in line.
                await mine.wait(lambda _: self._release(tenant), on_joined=on_queued)
            except BaseException:
                self._leave_if_empty(tenant)
                raise
        self._admitted += 1
        try:
            yield
        finally:
            self._release(tenant)

    @asynccontextmanager
    async def beside(self) -> AsyncIterator[None]:
        """Count a run that takes no slot: a session's, whose cgroup shares the CPU by weight
        with every other sandbox and whose memory is already held, so a run that sleeps or
        waits for I/O keeps no one else from running."""
        self._beside += 1
        try:
            yield
        finally:
            self._beside -= 1

    @property
    def waiting(self) -> int:
        """Jobs waiting for a slot, of every tenant."""
        return sum(map(len, self._queues.values()))

    def queued_for(self, tenant: str) -> int:
        """Jobs of ``tenant`` waiting for a slot."""
        return len(self._queues.get(tenant, ()))

    def statistics(self) -> SchedulerStatistics:
        return SchedulerStatistics(
            self.capacity,
            self._running,
            self.waiting,
            self.queue_size,
            self._admitted,
            self._busy,
            self._memory_waits,
            len(self._queues),
            self.max_queued_per_tenant,
            self._beside,
        )
