"""A batch on this machine: one engine, a bounded window of runs in flight, records in order."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from corral._limits import Limits
from corral.batch._items import BatchItem, Record, host_name, invalid_record, parse_item, record_for
from corral.engine import Case, Engine, ExecutionResult
from corral.errors import LanguageUnavailable

__all__ = ["QUEUE_WAIT", "run_item", "run_local", "window_for"]

QUEUE_WAIT = 24 * 3600.0
"""Seconds an item may wait for a worker: the window, not a deadline, bounds the queue, so an
item's ``timeout`` is its own running time however long the items before it take."""
_WINDOW_PER_WORKER = 4  # items in flight per worker: enough that a slow head never idles one
_MIN_WINDOW = 16


def window_for(capacity: int) -> int:
    """Items in flight at once (queued or running) for ``capacity`` workers."""
    return max(_WINDOW_PER_WORKER * capacity, _MIN_WINDOW)


async def run_item(engine: Engine, item: BatchItem, base: Limits) -> ExecutionResult:
    """One item's fresh isolated run: items that repeat a program (test cases of one
    problem) fork from a case server kept for it (``Engine.run_case``)."""
    stdin = None if item.stdin is None else item.stdin.encode("utf-8", "surrogatepass")
    case = Case(stdin=stdin, limits=item.limits(base))
    try:
        return await engine.run_case(
            item.code, case, queue_timeout=QUEUE_WAIT, language=item.language
        )
    except LanguageUnavailable as exc:  # a line's mistake is its record, not the batch's end
        return ExecutionResult(outcome="invalid_input", message=str(exc))


_Slot = tuple[Any, "BatchItem | str", "Future[ExecutionResult] | None"]


def _finish(slot: _Slot, node: str) -> Record:
    raw, item, future = slot
    if isinstance(item, str) or future is None:
        return invalid_record(raw, item if isinstance(item, str) else "not run", node)
    return record_for(item.id, future.result(), node)


def run_local(
    entries: Iterable[Any], *, concurrency: int | None = None, limits: Limits | None = None
) -> Iterator[Record]:
    """Run every entry in a fresh worker here; yield records in input order as they finish.

    Raises:
        IsolationError: this host cannot build the sandbox.
    """
    capacity = concurrency or os.cpu_count() or 1
    window = window_for(capacity)
    node = host_name()
    with start_blocking_portal("asyncio") as portal:
        engine_cm = Engine(capacity=capacity, queue_size=window)
        with portal.wrap_async_context_manager(engine_cm) as engine:
            yield from _pump(portal, engine, entries, window, limits or engine.limits, node)


def _pump(
    portal: BlockingPortal,
    engine: Engine,
    entries: Iterable[Any],
    window: int,
    base: Limits,
    node: str,
) -> Iterator[Record]:
    pending: deque[_Slot] = deque()
    try:
        for raw in entries:
            item = parse_item(raw)
            future = (
                None
                if isinstance(item, str)
                else portal.start_task_soon(run_item, engine, item, base)
            )
            pending.append((raw, item, future))
            while pending and (len(pending) >= window or _done(pending[0])):
                yield _finish(pending.popleft(), node)
        while pending:
            yield _finish(pending.popleft(), node)
    finally:
        for _, _, future in pending:
            if future is not None:
                future.cancel()


def _done(slot: _Slot) -> bool:
    future = slot[2]
    return future is None or future.done()
