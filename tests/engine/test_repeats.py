"""Engine.run_case: calls that repeat a program fork from a case server kept for it (real
workers: a case names its server from inside it); the queue bounds that calls waiting for a
server count against, on the sandbox's in-process twin."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import anyio
import pytest
from trio.testing import MockClock

from corral._limits import Limits
from corral.engine import Case, Engine
from corral.engine import _repeats as repeats_module
from tests.engine.twinkit import StandIn, standing_in, twin_engine

pytestmark = pytest.mark.anyio

# A fresh worker is init of its own pid namespace; a case forked from a case server is not.
# A case names its server: the pid namespace, and (the kernel reuses a freed namespace's
# number) the server's host uid and start time.
WHERE = (
    "import os\n"
    "uid = open('/proc/self/uid_map').read().split()[1]\n"
    "started = open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]\n"
    "server = os.readlink('/proc/self/ns/pid') + '/' + uid + '/' + started\n"
    "print('fresh' if os.getpid() == 1 else server, input())\n"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def real_engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=Limits(timeout=10)) as started:
        yield started


@pytest.fixture
def clock(real_engine: Engine) -> Clock:
    fake = Clock()
    real_engine._repeats._clock = fake
    return fake


QUEUE_WAIT = 30.0  # seconds, as /run_code gives a call (its compile_timeout)


async def _where(
    engine: Engine,
    code: str = WHERE,
    tenant: str = "t",
    n: int = 0,
    queue_timeout: float | None = QUEUE_WAIT,
) -> str:
    result = await engine.run_case(
        code, Case(stdin=f"{n}\n".encode()), tenant=tenant, queue_timeout=queue_timeout
    )
    assert result.outcome == "ok", result
    where, echoed = result.stdout.split()
    assert echoed == str(n)
    return where


async def test_a_first_call_runs_fresh_and_repeats_fork_from_one_kept_server(
    real_engine: Engine,
) -> None:
    places = [await _where(real_engine, n=n) for n in range(5)]
    assert places[0] == "fresh"
    assert "fresh" not in places[1:]
    assert len(set(places[1:])) == 1  # one after another: one server is enough
    assert real_engine.statistics().case_servers == 1


async def test_tenants_and_programs_never_share_a_server(real_engine: Engine) -> None:
    other_code = WHERE + "# another program\n"
    places: dict[tuple[str, str], set[str]] = {}
    for _ in range(3):
        for tenant in ("a", "b"):
            for code in (WHERE, other_code):
                places.setdefault((tenant, code), set()).add(
                    await _where(real_engine, code, tenant)
                )
    servers = [where - {"fresh"} for where in places.values()]
    assert all(len(s) == 1 for s in servers)
    assert len(set.union(*servers)) == 4  # one per tenant and program
    assert real_engine.statistics().case_servers == 4


async def test_concurrent_repeats_share_at_most_capacity_servers(real_engine: Engine) -> None:
    await _where(real_engine)
    answers: dict[int, str] = {}

    async def call(n: int) -> None:
        answers[n] = await _where(real_engine, n=n)

    async with anyio.create_task_group() as tg:
        for n in range(12):
            tg.start_soon(call, n)
    assert "fresh" not in answers.values()
    assert len(set(answers.values())) <= real_engine.capacity
    assert real_engine.statistics().case_servers <= real_engine.capacity


async def test_without_a_queue_timeout_a_call_does_not_wait_for_a_busy_server(
    real_engine: Engine,
) -> None:
    # Queue and run then share the run's timeout, which waiting for one of the program's
    # servers would not count against: with both busy (capacity 2), such a call runs fresh.
    code = "import os, time\ntime.sleep(float(input()))\nprint(os.getpid() == 1)"
    first = await real_engine.run_case(code, Case(stdin=b"0\n"))
    assert first.stdout == "True\n"
    answers: list[str] = []

    async def call(seconds: str, queue_timeout: float | None) -> None:
        result = await real_engine.run_case(
            code, Case(stdin=f"{seconds}\n".encode()), queue_timeout=queue_timeout
        )
        answers.append(result.stdout.strip())

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "1", QUEUE_WAIT)
        tg.start_soon(call, "1", QUEUE_WAIT)
        with anyio.fail_after(QUEUE_WAIT):
            while real_engine.statistics().case_servers < real_engine.capacity:  # noqa: ASYNC110 - no event
                await anyio.sleep(0.01)
        tg.start_soon(call, "0", None)
    assert sorted(answers) == ["False", "False", "True"]


async def test_a_case_that_times_out_leaves_its_server_serving(real_engine: Engine) -> None:
    code = "import time, os\nn = float(input())\ntime.sleep(n)\nprint(os.getpid() == 1)"
    quick = Case(stdin=b"0\n")
    first = await real_engine.run_case(code, quick)
    assert first.stdout == "True\n"  # fresh
    slow = await real_engine.run_case(code, Case(stdin=b"30\n", limits=Limits(timeout=0.5)))
    assert slow.outcome == "timeout"
    after = await real_engine.run_case(code, quick)
    assert (after.outcome, after.stdout) == ("ok", "False\n")  # a case again
    assert real_engine.statistics().case_servers == 1


async def test_a_program_not_repeated_within_the_window_runs_fresh(
    real_engine: Engine, clock: Clock
) -> None:
    assert await _where(real_engine) == "fresh"
    clock.now += repeats_module.REPEAT_WINDOW + 1
    assert await _where(real_engine) == "fresh"
    clock.now += 1
    assert await _where(real_engine) != "fresh"


async def test_idle_servers_are_closed(real_engine: Engine, clock: Clock) -> None:
    await _where(real_engine)
    kept = await _where(real_engine)
    assert real_engine.statistics().case_servers == 1
    clock.now += repeats_module.IDLE_SECONDS - 1
    real_engine._repeats.expire()
    assert real_engine.statistics().case_servers == 1
    assert await _where(real_engine) == kept
    clock.now += repeats_module.IDLE_SECONDS
    real_engine._repeats.expire()
    assert real_engine.statistics().case_servers == 0
    replaced = await _where(real_engine)
    assert replaced not in ("fresh", kept)  # still a repeat: a new server


async def test_the_servers_in_all_are_bounded(real_engine: Engine) -> None:
    most = 2 * real_engine.capacity
    codes = [WHERE + f"# program {i}\n" for i in range(most + 2)]
    for code in codes:
        await _where(real_engine, code)
        assert await _where(real_engine, code) != "fresh"
        assert real_engine.statistics().case_servers <= most
    assert (
        real_engine.statistics().case_servers == most
    )  # the longest idle made room for each newcomer


async def test_a_closed_engine_closes_its_servers(real_engine: Engine) -> None:
    await _where(real_engine)
    await _where(real_engine)
    await real_engine.aclose()
    assert real_engine.statistics().case_servers == 0


NAP = "import time\ntime.sleep(0.3)\nprint('slept')"
"""A case that takes 0.3 s; on the twin a stand-in that waits 0.3 s of the mock clock."""


@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_calls_waiting_for_servers_count_against_the_queue_bounds() -> None:
    code = NAP
    handler = standing_in({NAP: StandIn("slept\n", seconds=0.3)})
    async with twin_engine(handler, capacity=2, queue_size=2, max_queued_per_tenant=1) as small:
        first = await small.run_case(code, Case(), queue_timeout=QUEUE_WAIT)
        assert first.outcome == "ok"
        outcomes: list[str] = []

        async def call() -> None:
            result = await small.run_case(code, Case(), queue_timeout=QUEUE_WAIT)
            outcomes.append(result.outcome)

        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(call)
    # As fresh runs would be: a few run, the rest find the queue full.
    assert set(outcomes) == {"ok", "busy"}
    assert outcomes.count("ok") <= 2 + 1 + 2  # two on servers, one waiting, two queued


async def test_a_kept_server_that_died_while_idle_is_replaced(real_engine: Engine) -> None:
    await _where(real_engine)
    kept = await _where(real_engine)
    (program,) = real_engine._repeats._programs.values()
    (lane, _) = program.idle[0]
    server = lane._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    with anyio.fail_after(QUEUE_WAIT):
        while lane.alive():  # noqa: ASYNC110 - the pidfd is not awaited here
            await anyio.sleep(0.01)
    replaced = await _where(real_engine)  # not a worker_error: the death was nobody's case
    assert replaced not in ("fresh", kept)
    assert real_engine.statistics().case_servers == 1


async def test_a_bad_stdin_fails_at_the_call_and_keeps_the_server(real_engine: Engine) -> None:
    await _where(real_engine)
    await _where(real_engine)
    with pytest.raises(TypeError, match="stdin must be bytes"):
        await real_engine.run_case(WHERE, Case(stdin="1\n"))  # type: ignore[arg-type]
    assert real_engine.statistics().case_servers == 1
    result = await real_engine.run_case(WHERE, Case(stdin=bytearray(b"7\n")))  # type: ignore[arg-type]
    assert result.stdout.split()[1] == "7"


@pytest.mark.isolation
async def test_a_freed_server_goes_to_the_call_that_waited_longest() -> None:
    # At capacity 1 a program has one server. While it serves A's first case, W waits for
    # it; A's next call, made the moment its first returns, queues behind W instead of
    # taking the server straight back.
    code = "import time\nn = input()\nprint(time.time())\nif n == 'slow':\n    time.sleep(1)\n"
    started: dict[str, float] = {}
    async with Engine(capacity=1, limits=Limits(timeout=10)) as single:

        async def call(name: str, stdin: bytes) -> None:
            result = await single.run_case(
                code, Case(stdin=stdin), tenant="t", queue_timeout=QUEUE_WAIT
            )
            assert result.outcome == "ok", result
            started[name] = float(result.stdout)

        async def first_then_next() -> None:
            await call("A1", b"slow\n")
            await call("A2", b"\n")

        await call("fresh", b"\n")
        async with anyio.create_task_group() as tg:
            tg.start_soon(first_then_next)
            with anyio.fail_after(QUEUE_WAIT):
                while single.statistics().case_servers < 1:  # noqa: ASYNC110 - no event for it
                    await anyio.sleep(0.01)
                tg.start_soon(call, "W", b"\n")
                while not single._repeats._waiting:  # noqa: ASYNC110 - no event for it
                    await anyio.sleep(0.01)
            assert "A1" not in started  # W began waiting while A's first case ran
    assert started["A1"] < started["W"] < started["A2"]
    assert single.statistics().case_servers == 0  # closed with the engine


@pytest.mark.isolation
async def test_a_call_that_gives_up_waiting_leaves_the_line() -> None:
    code = (
        "import os, time\nn = input()\nif n == 'slow':\n    time.sleep(1)\n"
        "print('fresh' if os.getpid() == 1 else 'server')\n"
    )
    outcomes: dict[str, tuple[str, str]] = {}
    async with Engine(capacity=1, limits=Limits(timeout=10)) as single:

        async def call(name: str, stdin: bytes, queue_timeout: float) -> None:
            result = await single.run_case(
                code, Case(stdin=stdin), tenant="t", queue_timeout=queue_timeout
            )
            outcomes[name] = (result.outcome, result.stdout.strip())

        await call("first", b"\n", QUEUE_WAIT)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "A", b"slow\n", QUEUE_WAIT)
            with anyio.fail_after(QUEUE_WAIT):
                while single.statistics().case_servers < 1:  # noqa: ASYNC110 - no event for it
                    await anyio.sleep(0.01)
                tg.start_soon(call, "impatient", b"\n", 0.2)
                tg.start_soon(call, "patient", b"\n", QUEUE_WAIT)
        (program,) = single._repeats._programs.values()
        assert not program.waiters
        assert single.statistics().case_servers == 1
    assert outcomes["first"] == ("ok", "fresh")
    assert outcomes["A"] == ("ok", "server")
    assert outcomes["impatient"][0] == "busy"  # its wait spent its queue timeout
    assert outcomes["patient"] == ("ok", "server")
