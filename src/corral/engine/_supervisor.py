"""Supervision of the engine's background work: a failing task is logged, backed off and
started again, and never cancels its siblings.

The engine's task group would cancel every task in it when one raises; so every long-lived
task (the zygotes with their read loops and refillers, the session expiry, the memory gate)
runs inside :func:`supervise`, which keeps failures to the task that had them. Cancellation
is never caught: it is how the engine stops them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["Backoff", "supervise"]

logger = logging.getLogger("corral.engine")

FIRST_BACKOFF = 0.5  # seconds before the first restart: a transient failure recovers fast
MAX_BACKOFF = 10.0  # seconds at most between restarts, so a broken host costs little CPU


class Backoff:
    """Exponential delays between restarts, reset by a success."""

    def __init__(self, first: float = FIRST_BACKOFF, most: float = MAX_BACKOFF) -> None:
        self._first = first
        self._most = most
        self.delay = first

    def reset(self) -> None:
        self.delay = self._first

    async def wait(self) -> None:
        delay, self.delay = self.delay, min(self.delay * 2, self._most)
        await anyio.sleep(delay)


async def supervise(
    name: str, task: Callable[[], Awaitable[None]], backoff: Backoff | None = None
) -> None:
    """Run ``task`` until it returns; after each failure log it, back off, start it again."""
    backoff = backoff or Backoff()
    while True:
        try:
            await task()
        except Exception:
            logger.exception("%s failed; restarting it in %.1f s", name, backoff.delay)
        else:
            return
        await backoff.wait()
