"""A session's background work (what outlives one call, like a command's output pump)."""

from __future__ import annotations

import anyio
import pytest

from corral.engine import Engine

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]


async def test_background_work_outlives_its_call_and_ends_with_the_session(
    real_engine: Engine,
) -> None:
    session = await real_engine.open_session()
    started, finished = anyio.Event(), anyio.Event()
    cancelled: list[bool] = []

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(True)
            finished.set()

    async def fails() -> None:
        raise RuntimeError("a background failure")

    session.background(work)
    session.background(fails)  # logged, never raised into the engine
    with anyio.fail_after(10):
        await started.wait()
        await session.close()
        await finished.wait()
    assert cancelled == [True]
    assert (await real_engine.run("6 * 7")).result == {"text/plain": "42"}  # the engine goes on
