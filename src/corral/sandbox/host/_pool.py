"""The warm pool: workers already cloned, isolated and waiting for code.

Refillers keep ``size`` workers ready so that fork, namespace set-up and pivot stay off the
critical path of a run. Each worker serves one run and is destroyed; a ready worker whose
zygote died is discarded when taken. A pool of size 0 keeps none ready: each run waits for a
worker made for it (an engine that serves one run, the CLI's, wants no spare).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import anyio.abc

from corral.errors import WorkerError
from corral.sandbox.host._backend import ZygoteLike
from corral.sandbox.host._worker import Worker

__all__ = ["PoolStatistics", "WarmPool"]

logger = logging.getLogger("corral.sandbox")


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    size: int
    ready: int
    spawned: int
    failed: int


class WarmPool:
    """Ready one-shot workers from one zygote.

    At most ``size`` workers exist at once, ready or being prepared. Making one costs a fork
    of the zygote and a few milliseconds of CPU, which would compete with the run that just
    took a worker; so while at least ``low_water`` workers are ready and runs are executing,
    refills wait for the runs to finish. Below the low-water mark they start at once.
    """

    def __init__(
        self, zygote: ZygoteLike, size: int, *, low_water: int = 1, ready: Worker | None = None
    ) -> None:
        """``ready``: a worker made already (the engine's start-up probe), served first."""
        self._zygote = zygote
        self.size = size
        self._low_water = min(low_water, size)
        self._send, self._receive = anyio.create_memory_object_stream[Worker](max(size, 1))
        self._slots = anyio.Semaphore(size)
        self._running = 0
        self._changed = anyio.Event()
        self._spawned = 0
        self._failed = 0
        self._last_error = ""
        if ready is not None:
            if size:
                self._slots.acquire_nowait()  # it counts against the size like a refill
            self._send.send_nowait(ready)

    async def run(self, task_group: anyio.abc.TaskGroup) -> None:
        for _ in range(self.size):
            task_group.start_soon(self._refill)

    def set_running(self, running: int) -> None:
        """Tell the pool how many runs execute now (the engine calls this on every change)."""
        self._running = running
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def ready(self) -> int:
        return self._receive.statistics().current_buffer_used

    async def _wait_for_quiet(self) -> None:
        while self.ready >= self._low_water and self._running > 0:
            await self._changed.wait()

    async def _refill(self) -> None:
        while not self._zygote.dead.is_set():
            await self._slots.acquire()
            try:
                await self._wait_for_quiet()
                worker = await self._prepare()
            except BaseException:
                self._slots.release()
                raise
            if worker is None:
                self._slots.release()
                if self._zygote.dead.is_set():
                    return
                await anyio.sleep(0.1)  # back off; the supervisor replaces a broken zygote
                continue
            try:
                self._send.send_nowait(worker)  # never full: a slot was held for it
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                worker.close()
                self._slots.release()
                return
            self._wake()

    async def _prepare(self) -> Worker | None:
        try:
            worker = await self._zygote.spawn_ready()
            self._spawned += 1
        except (WorkerError, OSError) as exc:  # OSError: EMFILE and the like; retried
            self._failed += 1
            self._last_error = str(exc)
            self._wake()
            if not self._zygote.dead.is_set():
                logger.exception("could not prepare a worker")
            return None
        return worker

    async def take(self) -> Worker:
        """A ready worker; waits (within the caller's deadline) if none is ready.

        Raises:
            WorkerError: a worker failed to be prepared while this call waited: the run fails
                now, with the reason, instead of waiting out its deadline. In a pool of size
                0: the worker made for this call failed.
        """
        failures = self._failed
        while True:
            try:
                worker = self._receive.receive_nowait()
            except anyio.WouldBlock:
                if not self.size:
                    return await self._make()
                if self._failed != failures:
                    raise WorkerError(f"no worker could be prepared: {self._last_error}") from None
                await self._changed.wait()
                continue
            if self.size:
                self._slots.release()
            self._wake()
            return worker

    async def _make(self) -> Worker:
        """A worker for the caller alone (a pool of size 0), its failure the caller's."""
        worker = await self._zygote.spawn_ready()
        self._spawned += 1
        return worker

    def close(self) -> None:
        self._send.close()
        while True:
            try:
                self._receive.receive_nowait().close()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        self._receive.close()
        self._wake()

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(self.size, self.ready, self._spawned, self._failed)
