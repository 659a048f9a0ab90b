"""The warm pool: workers already cloned, isolated and waiting for code.

Refillers keep ``size`` workers ready so that fork, namespace set-up and pivot stay off the
critical path of a run. Each worker serves one run and is destroyed; a ready worker whose
zygote died is discarded when taken.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import anyio.abc

from corral.errors import WorkerError
from corral.sandbox._host import ZygoteHost
from corral.sandbox._worker import Worker

__all__ = ["PoolStatistics", "WarmPool"]

logger = logging.getLogger("corral.sandbox")


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    size: int
    ready: int
    spawned: int
    failed: int


class WarmPool:
    """Ready one-shot workers from one zygote."""

    def __init__(self, host: ZygoteHost, size: int) -> None:
        self._host = host
        self.size = size
        self._send, self._receive = anyio.create_memory_object_stream[Worker](size)
        self._spawned = 0
        self._failed = 0

    async def run(self, task_group: anyio.abc.TaskGroup) -> None:
        for _ in range(self.size):
            task_group.start_soon(self._refill)

    async def _refill(self) -> None:
        while not self._host.dead.is_set():
            try:
                worker = await self._host.spawn()
                self._spawned += 1
                try:
                    await worker.wait_ready()
                except BaseException:
                    worker.close()
                    raise
            except WorkerError:
                self._failed += 1
                if self._host.dead.is_set():
                    return
                logger.exception("could not prepare a worker")
                await anyio.sleep(0.1)  # back off; the supervisor replaces a broken zygote
                continue
            try:
                await self._send.send(worker)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                worker.close()
                return
            except BaseException:
                worker.close()
                raise

    async def take(self) -> Worker:
        """A ready worker; waits (within the caller's deadline) if none is ready."""
        return await self._receive.receive()

    def close(self) -> None:
        self._send.close()
        while True:
            try:
                self._receive.receive_nowait().close()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        self._receive.close()

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            self.size, self._receive.statistics().current_buffer_used, self._spawned, self._failed
        )
