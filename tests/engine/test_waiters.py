"""The line of waiters the scheduler and the case servers share: arrival order, hand-off on
grant, and what a waiter cancelled around its grant does with it.

Each interleaving is stepped task by task (``wait_all_tasks_blocked``): a grant or a cancel
made before a waiting task runs again is one made "at the same moment" as far as it knows.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import TaskGroup
from trio.testing import MockClock

from corral.engine._waiters import WaitQueue

pytestmark = pytest.mark.anyio

_BOUND = 5  # seconds for a test's waiters to finish: only a lost grant runs it out


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # The two backends deliver a cancel to a task blocked on an event differently.
    return str(request.param)


class Waiters:
    """Tasks waiting in one line, the value each was granted, and the grants each gave back
    (which the owner here passes on to the next in line, as the scheduler and repeats do)."""

    def __init__(self, tg: TaskGroup) -> None:
        self.queue: WaitQueue[str] = WaitQueue()
        self.got: dict[str, str] = {}
        self.abandoned: list[tuple[str, str]] = []
        self.gave_up: list[str] = []
        self.scopes: dict[str, anyio.CancelScope] = {}
        self._tg = tg

    async def join(self, *names: str, first: bool = False) -> None:
        """One waiting task per name, each in line before the next joins."""
        for name in names:
            self.scopes[name] = anyio.CancelScope()
            self._tg.start_soon(self._wait, name, first)
            await anyio.wait_all_tasks_blocked()

    async def _wait(self, name: str, first: bool) -> None:
        def pass_on(value: str) -> None:
            self.abandoned.append((name, value))
            self.queue.grant(value)

        with self.scopes[name]:
            self.got[name] = await self.queue.wait(pass_on, first=first)
        if self.scopes[name].cancelled_caught:
            self.gave_up.append(name)


@contextlib.asynccontextmanager
async def _waiters() -> AsyncIterator[Waiters]:
    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            yield Waiters(tg)


async def test_grants_go_to_the_waiters_in_arrival_order() -> None:
    async with _waiters() as waiters:
        await waiters.join("w1", "w2", "w3")
        assert len(waiters.queue) == 3
        for value in ("a", "b", "c"):
            assert waiters.queue.grant(value)
        assert len(waiters.queue) == 0
    assert waiters.got == {"w1": "a", "w2": "b", "w3": "c"}
    assert waiters.queue.grant("nobody") is False


async def test_a_grant_is_the_first_waiters_before_it_runs_again() -> None:
    # Handed off, not left for the taking: a task that joins between the grant and the
    # granted task's next step queues behind, and gets the next grant.
    async with _waiters() as waiters:
        await waiters.join("first")
        waiters.queue.grant("freed")
        assert len(waiters.queue) == 0
        await waiters.join("newcomer")
        assert waiters.got == {"first": "freed"}
        waiters.queue.grant("next")
    assert waiters.got == {"first": "freed", "newcomer": "next"}


async def test_a_waiter_joining_first_goes_ahead_of_the_line() -> None:
    async with _waiters() as waiters:
        await waiters.join("w1", "w2")
        await waiters.join("returning", first=True)
        for value in ("a", "b", "c"):
            waiters.queue.grant(value)
    assert waiters.got == {"returning": "a", "w1": "b", "w2": "c"}


async def test_a_waiter_cancelled_before_any_grant_leaves_the_line() -> None:
    async with _waiters() as waiters:
        await waiters.join("quitter", "patient")
        waiters.scopes["quitter"].cancel()
        await anyio.wait_all_tasks_blocked()
        assert len(waiters.queue) == 1
        assert waiters.queue.grant("a")
    assert waiters.got == {"patient": "a"}
    assert waiters.gave_up == ["quitter"]
    assert waiters.abandoned == []


async def test_a_waiter_cancelled_then_granted_before_it_runs_passes_the_grant_on() -> None:
    async with _waiters() as waiters:
        await waiters.join("quitter", "next")
        waiters.scopes["quitter"].cancel()
        assert waiters.queue.grant("a")  # still first in line: its task has not run yet
    assert waiters.abandoned == [("quitter", "a")]
    assert waiters.got == {"next": "a"}
    assert waiters.gave_up == ["quitter"]


async def test_a_waiter_granted_then_cancelled_before_it_runs_passes_the_grant_on() -> None:
    async with _waiters() as waiters:
        await waiters.join("quitter", "next")
        assert waiters.queue.grant("a")
        waiters.scopes["quitter"].cancel()  # granted, but it never gets to use it
    assert waiters.abandoned == [("quitter", "a")]
    assert waiters.got == {"next": "a"}
    assert waiters.gave_up == ["quitter"]


async def test_a_grant_given_back_with_nobody_left_in_line_goes_back_to_the_owner() -> None:
    async with _waiters() as waiters:
        await waiters.join("quitter")
        waiters.queue.grant("a")
        waiters.scopes["quitter"].cancel()
    assert waiters.abandoned == [("quitter", "a")]  # the owner's grant found no one
    assert waiters.got == {}
    assert len(waiters.queue) == 0


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}))]
)
async def test_a_waiter_that_times_out_leaves_the_line() -> None:
    queue: WaitQueue[str] = WaitQueue()
    abandoned: list[str] = []
    started = anyio.current_time()
    with anyio.move_on_after(5) as scope:
        await queue.wait(abandoned.append)
    assert scope.cancelled_caught
    assert anyio.current_time() - started == pytest.approx(5)
    assert len(queue) == 0
    assert abandoned == []
    assert queue.grant("late") is False


async def test_on_joined_sees_the_waiter_in_line_and_a_failure_there_takes_it_out() -> None:
    queue: WaitQueue[str] = WaitQueue()
    seen: list[int] = []

    def failing() -> None:
        seen.append(len(queue))
        raise RuntimeError("listener failed")

    with pytest.raises(RuntimeError, match="listener failed"):
        await queue.wait(lambda _: None, on_joined=failing)
    assert seen == [1]
    assert len(queue) == 0


async def test_first_arrival_orders_the_heads_of_several_lines() -> None:
    early: WaitQueue[str] = WaitQueue()
    late: WaitQueue[str] = WaitQueue()
    with pytest.raises(IndexError):
        _ = early.first_arrival
    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            for queue in (early, late, early):
                tg.start_soon(queue.wait, lambda _: None)
                await anyio.wait_all_tasks_blocked()
            assert early.first_arrival < late.first_arrival
            early.grant("a")  # its second waiter came after late's first
            assert early.first_arrival > late.first_arrival
            early.grant("b")
            late.grant("c")
