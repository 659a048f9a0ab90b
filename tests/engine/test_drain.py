"""Engine.drain, the engine side of a graceful stop, on the sandbox's in-process twin under
trio's MockClock (the real SIGTERM test is tests/http/test_shutdown.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult
from corral.errors import EngineClosed
from corral.sandbox import InProcessBackend, RunRequest, TwinIO, TwinReply

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return "trio", {"clock": MockClock(autojump_threshold=0)}


async def _sleeps(request: RunRequest, io: TwinIO) -> TwinReply:
    await anyio.sleep(float(request.code))
    await io.stdout("done\n")
    return TwinReply()


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    twin = InProcessBackend(_sleeps)
    async with Engine(
        capacity=2, pool_size=2, lean=False, limits=Limits(timeout=600), backend=twin
    ) as started:
        yield started


async def test_drain_lets_runs_finish_within_the_grace_then_cancels_the_rest(
    engine: Engine,
) -> None:
    results: dict[str, ExecutionResult] = {}

    async def run(name: str, seconds: float) -> None:
        results[name] = await engine.run(str(seconds))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "short", 2.0)
        tg.start_soon(run, "long", 300.0)
        await anyio.sleep(0.1)
        tg.start_soon(run, "queued", 300.0)  # capacity 2: it waits for a worker
        await anyio.sleep(0.4)
        assert engine.statistics().queued == 1
        started = anyio.current_time()
        async with anyio.create_task_group() as drains:
            drains.start_soon(engine.drain, 5.0)
            drains.start_soon(engine.drain, 5.0)  # a second stop request shares the wait
            await anyio.sleep(0.01)  # virtual time: both drains have begun
            with pytest.raises(EngineClosed, match="shutting down"):
                await engine.run("1")
            with pytest.raises(EngineClosed, match="shutting down"):
                await engine.open_session()
        drained_in = anyio.current_time() - started
    assert (results["short"].outcome, results["short"].stdout) == ("ok", "done\n")
    for name in ("long", "queued"):
        assert results[name].outcome == "cancelled", results[name]
        assert results[name].message == "the server is shutting down"
    assert drained_in == pytest.approx(5.0, abs=0.1)  # the grace, on the mock clock


async def test_drain_returns_at_once_when_nothing_runs(engine: Engine) -> None:
    with anyio.fail_after(0.01):  # mock time: only a wait would pass it
        await engine.drain(30.0)
    assert engine.statistics().running == 0
