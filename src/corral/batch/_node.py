"""The Ray actor: one corral engine on one Ray node.

Imported by Ray on each node; only this class's methods touch Ray's runtime context. The
engine lives in a task of its own for the actor's lifetime (an anyio task group must end in the
task that began it), and every ``run`` call borrows it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral.batch._items import Record, parse_item, record_for
from corral.batch._local import run_item, window_for
from corral.engine import Engine

__all__ = ["NodeEngine"]


class NodeEngine:
    """Serves batch items on the node it was pinned to, ``capacity`` runs at once."""

    def __init__(self, capacity: int) -> None:
        import ray

        self.capacity = capacity
        self.node = str(ray.get_runtime_context().get_node_id())
        self._engine: Engine | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._keeper: asyncio.Task[None] | None = None

    async def _keep(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        try:
            # The driver sends at most a window per node; room to spare for its retries.
            queue = 2 * window_for(self.capacity)
            async with Engine(capacity=self.capacity, queue_size=queue) as e:
                self._engine = e
                ready.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise
        finally:
            self._engine = None

    async def start(self) -> str:
        """Start the engine (once); returns this node's id.

        Raises:
            IsolationError: the node cannot build corral's sandbox.
        """
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._keeper = asyncio.create_task(self._keep(self._ready, self._stop))
        await asyncio.shield(self._ready)
        return self.node

    async def run(self, raw: dict[str, Any]) -> Record:
        """One item's record, with this node's id."""
        await self.start()
        item = parse_item(raw)
        engine = self._engine
        if isinstance(item, str) or engine is None:
            raise ValueError(f"not a batch item: {item}")
        result = await run_item(engine, item, engine.limits)
        return record_for(item.id, result, self.node)

    async def stop(self) -> None:
        """Close the engine and its workers; the actor can then be killed."""
        if self._stop is not None and self._keeper is not None:
            self._stop.set()
            await self._keeper
