"""A line of tasks waiting for something their owner hands out one at a time: a run slot, a
kept case server.

The owner hands each freed thing straight to the first waiter (``grant``), so a task that
arrives after the release queues behind it instead of taking it first. A waiter cancelled
before it is granted leaves the line. One cancelled at the moment it is granted (granted, but
not yet running again) never uses the grant: it gives it back to the owner's ``on_abandoned``,
which passes it on, so a grant is never lost with the task that gave up.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["WaitQueue"]

T = TypeVar("T")

_arrivals = itertools.count()
"""One order of arrival for every line in the process, so the first of two lines compare."""


class _Waiter(Generic[T]):
    __slots__ = ("arrival", "event", "granted")

    def __init__(self) -> None:
        self.arrival = next(_arrivals)
        self.event = anyio.Event()
        self.granted: tuple[T] | None = None
        """The value handed to this waiter, once it is granted one (a tuple: it may be None)."""


class WaitQueue(Generic[T]):
    """Tasks waiting in arrival order, each handed what it waits for by ``grant``."""

    def __init__(self) -> None:
        self._waiters: deque[_Waiter[T]] = deque()

    def __len__(self) -> int:
        return len(self._waiters)

    @property
    def first_arrival(self) -> int:
        """When the first waiter joined the line, in one order of arrival shared by every
        line: the smaller of two lines' values belongs to the one that waits longer.

        Raises:
            IndexError: nobody waits.
        """
        return self._waiters[0].arrival

    def grant(self, value: T) -> bool:
        """Hand ``value`` to the first waiter, which leaves the line.

        Returns:
            False, and nothing is handed, when nobody waits.
        """
        if not self._waiters:
            return False
        waiter = self._waiters.popleft()
        waiter.granted = (value,)
        waiter.event.set()
        return True

    async def wait(
        self,
        on_abandoned: Callable[[T], None],
        *,
        first: bool = False,
        on_joined: Callable[[], None] | None = None,
    ) -> T:
        """Wait in line until ``grant`` hands this task a value, and return it.

        Args:
            on_abandoned: called with the value if this task is cancelled at the moment it
                is granted one, before it could use it: the owner passes it on.
            first: join at the head of the line (a waiter that was granted something it
                could not use, and must wait again, keeps its place).
            on_joined: called once this task is in line; if it raises, the task leaves.

        Raises:
            The cancellation of this task, or what ``on_joined`` raised: the task has left
            the line, or given its grant to ``on_abandoned``.
        """
        waiter: _Waiter[T] = _Waiter()
        if first:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            if on_joined is not None:
                on_joined()
            await waiter.event.wait()
            # Granted and cancelled in the same tick: the grant must not be used.
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            if waiter.granted is None:
                self._waiters.remove(waiter)
            else:
                on_abandoned(waiter.granted[0])
            raise
        assert waiter.granted is not None  # only grant sets the event
        return waiter.granted[0]
