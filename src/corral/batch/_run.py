"""``run_batch``: the one entry point, here or on Ray."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from corral._limits import Limits
from corral.batch._items import BatchItem, Record

__all__ = ["run_batch"]


def run_batch(
    items: Iterable[BatchItem | Any],
    *,
    concurrency: int | None = None,
    ray_address: str | None = None,
    limits: Limits | None = None,
) -> Iterator[Record]:
    """Run each item once, in a fresh isolated worker; yield one record per item, in order.

    Items are ``BatchItem``s or mappings ``{"id", "code", "stdin"?, "timeout"?}``; anything
    else gets an ``invalid_input`` record in its place. A record is ``{"id", ...the full
    result..., "node"}`` and comes as soon as it and every record before it are done, so a
    consumer that writes them as they come loses no finished one in a crash. Items are read
    only as workers free up (back-pressure), so the input may be a lazy iterator of any size.

    Args:
        items: what to run.
        concurrency: runs at once per engine; default the machine's (or each Ray node's) CPUs.
        ray_address: ``"auto"`` or a Ray cluster address: one engine per alive node, and
            ``node`` names the Ray node; None runs here and ``node`` is the host name.
        limits: bounds of each run (local runs only); an item's ``timeout`` overrides them.

    Raises:
        IsolationError: this host (or a Ray node) cannot build corral's sandbox.
        ConfigError: ``ray_address`` was given but Ray is not installed or has no node.
    """
    if ray_address is not None:
        from corral.batch._ray import run_on_ray

        return run_on_ray(items, address=ray_address, concurrency=concurrency)
    from corral.batch._local import run_local

    return run_local(items, concurrency=concurrency, limits=limits)
