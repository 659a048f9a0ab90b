"""Who gets a kept case server: the line of calls waiting for one, as fast logic tests.

``Repeats`` with stand-ins for its lanes and the scheduler's bounds, stepped task by task
(``wait_all_tasks_blocked``), so each interleaving is the one named. The same bookkeeping with
real case servers is tested in ``test_repeats.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from corral.engine import _repeats as repeats_module
from corral.engine._repeats import Repeats

pytestmark = pytest.mark.anyio

P, Q, S = ("t", b"P"), ("t", b"Q"), ("t", b"S")


class StandInLane:
    def __init__(self, _workers: object, _runs: object, code: str, _launch: object) -> None:
        self.code = code
        self.closed = False

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


class Bounds:
    queue_size = 100
    max_queued_per_tenant = 100

    def statistics(self) -> SimpleNamespace:
        return SimpleNamespace(queued=0)

    def queued_for(self, _tenant: str) -> int:
        return 0


@pytest.fixture
def repeats(monkeypatch: pytest.MonkeyPatch) -> Repeats:
    monkeypatch.setattr(repeats_module, "Lane", StandInLane)
    workers: Any = SimpleNamespace()  # the stand-in lanes make no worker
    runs: Any = SimpleNamespace(open=True, scheduler=Bounds())
    fresh: Any = SimpleNamespace()
    # capacity 1: one server per program, two in all
    made = Repeats(workers, runs, fresh, capacity=1, clock=lambda: 0.0)
    for key in (P, Q, S):
        made._repeated(key, 0.0)  # each program has been called once: the next repeats it
    return made


class Calls:
    """Calls waiting for a server of a program, and what each got."""

    def __init__(self, repeats: Repeats, tg: TaskGroup) -> None:
        self._repeats = repeats
        self._tg = tg
        self.got: dict[str, Any] = {}
        self.order: list[str] = []

    async def start(self, *names: str, patience: float = 60) -> None:
        """Start a call of P per name, in that order, each waiting before the next starts."""
        for name in names:
            self._tg.start_soon(self._call, name, patience)
            await anyio.wait_all_tasks_blocked()

    async def _call(self, name: str, patience: float) -> None:
        with anyio.move_on_after(patience) as scope:
            lane = await self._repeats._lane(P, "code", wait=True)
        self.got[name] = "gave up" if scope.cancelled_caught else lane
        self.order.append(name)


async def _hold(repeats: Repeats, key: tuple[str, bytes] = P) -> Any:
    """A server of ``key`` for a call that keeps it until the test gives it back."""
    lane = await repeats._lane(key, "code", wait=True)
    assert lane is not None
    return lane


async def test_a_freed_server_goes_to_the_first_in_line(repeats: Repeats) -> None:
    held = await _hold(repeats)
    async with anyio.create_task_group() as tg:
        calls = Calls(repeats, tg)
        await calls.start("W1", "W2")
        repeats._give_back(P, held, keep=True)  # handed to W1, which has not run yet ...
        await calls.start("late")  # ... so a call that comes now queues behind W2
        assert calls.order == ["W1"]
        for _ in range(2):
            repeats._give_back(P, held, keep=True)
            await anyio.wait_all_tasks_blocked()
    assert calls.order == ["W1", "W2", "late"]
    assert all(calls.got[name] is held for name in calls.order)


async def test_waiters_of_a_program_left_without_a_server_run_fresh(repeats: Repeats) -> None:
    # P's only server closes; before the woken W1 runs, S takes the room left. W1 then runs
    # fresh, and so must W2: no server of P is left to free for it.
    held_p = await _hold(repeats, P)
    await _hold(repeats, Q)
    async with anyio.create_task_group() as tg:
        calls = Calls(repeats, tg)
        await calls.start("W1", "W2")
        repeats._give_back(P, held_p, keep=False)
        await _hold(repeats, S)
        await anyio.wait_all_tasks_blocked()
        assert calls.got == {"W1": None, "W2": None}
    assert P not in repeats._programs
    assert not repeats._waiting


async def test_one_woken_to_make_a_server_and_beaten_to_it_keeps_its_place(
    repeats: Repeats,
) -> None:
    held = await _hold(repeats)
    async with anyio.create_task_group() as tg:
        calls = Calls(repeats, tg)
        await calls.start("W1", "W2")
        repeats._give_back(P, held, keep=False)  # W1 is woken to make one ...
        newcomer = await _hold(repeats)  # ... which a newcomer makes
        await anyio.wait_all_tasks_blocked()
        assert calls.order == []
        repeats._give_back(P, newcomer, keep=True)
        await anyio.wait_all_tasks_blocked()
        assert calls.order == ["W1"]  # not W2, which came later
        repeats._give_back(P, newcomer, keep=True)
    assert calls.order == ["W1", "W2"]


async def test_a_waiter_that_gives_up_leaves_the_line(repeats: Repeats) -> None:
    held = await _hold(repeats)
    async with anyio.create_task_group() as tg:
        calls = Calls(repeats, tg)
        await calls.start("impatient", patience=0)  # its timer ends its wait at once
        await calls.start("patient")
        assert calls.got == {"impatient": "gave up"}
        repeats._give_back(P, held, keep=True)
    assert calls.got == {"impatient": "gave up", "patient": held}
    assert not repeats._programs[P].waiters
    assert not repeats._waiting


@pytest.mark.parametrize("kept", [True, False], ids=["handed the server", "woken to make one"])
async def test_a_call_that_gives_up_as_it_is_served_passes_it_on(
    repeats: Repeats, kept: bool
) -> None:
    # Handed the freed server, or woken to make one in place of a closed one, at the moment
    # it gives up: the call behind it is served instead.
    held = await _hold(repeats)
    async with anyio.create_task_group() as tg:
        calls = Calls(repeats, tg)
        quitter = anyio.CancelScope()

        async def quitting() -> None:
            with quitter:
                await repeats._lane(P, "code", wait=True)
            calls.order.append("quitter")

        tg.start_soon(quitting)
        await anyio.wait_all_tasks_blocked()
        await calls.start("next")
        quitter.cancel()  # the quitter gives up ...
        repeats._give_back(P, held, keep=kept)  # ... as it is served
        await anyio.wait_all_tasks_blocked()
    assert calls.order == ["quitter", "next"]
    served = calls.got["next"]
    assert (served is held) == kept  # the same server, or a new one in its place
    assert isinstance(served, StandInLane)
    assert not served.closed
    assert repeats.servers == 1
