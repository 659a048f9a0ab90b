"""One process-wide scheduler: a capacity of running workers, a bounded FIFO queue, and a
memory-pressure gate.

A queued job that is cancelled leaves the queue before it is granted, so it never starts
later; one granted at the moment it was cancelled hands its slot straight on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.lowlevel

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


class _Waiter:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False


class Scheduler:
    """Grants run slots in arrival order."""

    def __init__(
        self,
        capacity: int,
        queue_size: int,
        *,
        min_free_memory: int = 0,
        memory_probe: Callable[[], int | None] = memory_available_bytes,
    ) -> None:
        if capacity < 1 or queue_size < 0:
            raise ValueError("capacity must be >= 1 and queue_size >= 0")
        self.capacity = capacity
        self.queue_size = queue_size
        self._min_free = min_free_memory
        self._probe = memory_probe
        self._running = 0
        self.on_running: Callable[[int], None] | None = None
        """Told the number of running jobs whenever it changes (the warm pool listens)."""
        self._queue: deque[_Waiter] = deque()
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

    def _grant_waiting(self) -> None:
        while self._queue and self._running < self.capacity and self._memory_ok():
            waiter = self._queue.popleft()
            waiter.granted = True
            self._set_running(self._running + 1)
            waiter.event.set()

    def _set_running(self, running: int) -> None:
        self._running = running
        if self.on_running is not None:
            self.on_running(running)

    def _release(self) -> None:
        self._set_running(self._running - 1)
        self._grant_waiting()

    def poke(self) -> None:
        """Re-check the memory gate (called periodically while jobs wait)."""
        self._grant_waiting()

    @asynccontextmanager
    async def slot(self, on_queued: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Hold one of ``capacity`` slots for the body.

        Raises:
            Busy: the queue already holds ``queue_size`` jobs.
        """
        if not self._queue and self._running < self.capacity and self._memory_ok():
            self._set_running(self._running + 1)
        else:
            if len(self._queue) >= self.queue_size:
                self._busy += 1
                raise Busy(f"run queue full ({self.queue_size} waiting)")
            waiter = _Waiter()
            self._queue.append(waiter)
            if on_queued is not None:
                on_queued()
            try:
                await waiter.event.wait()
                # Granted and cancelled in the same tick: never enter the body.
                await anyio.lowlevel.checkpoint_if_cancelled()
            except BaseException:
                if waiter.granted:
                    self._release()
                else:
                    self._queue.remove(waiter)
                raise
        self._admitted += 1
        try:
            yield
        finally:
            self._release()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def statistics(self) -> SchedulerStatistics:
        return SchedulerStatistics(
            self.capacity,
            self._running,
            len(self._queue),
            self.queue_size,
            self._admitted,
            self._busy,
            self._memory_waits,
        )
