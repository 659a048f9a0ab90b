"""A closed connection cancels its run on every route: real server, real sockets, over the
sandbox's in-process twin (the spinning code played by a stand-in that runs until stopped)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import ALICE, KEYS, OPS, TIMEOUT
from tests.http.livekit import live
from tests.http.twinkit import Script, runs_until_stopped

pytestmark = [pytest.mark.anyio, pytest.mark.network]

SPIN = "while True: pass"
FREED_BOUND = 15.0  # seconds; the run's own deadline is 20 s, so freeing proves cancellation
_POLL = 0.01  # seconds between looks at /health


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {SPIN: runs_until_stopped()}


def _cancelled(engine: Engine) -> int:
    return engine.statistics().runs_by_outcome.get("cancelled", 0)


async def _idle(base_url: str, engine: Engine, cancelled: int) -> None:
    """Wait (bounded) until /health reports no run and the run was counted ``cancelled``."""
    async with httpx.AsyncClient(base_url=base_url, timeout=5) as client:
        with anyio.fail_after(FREED_BOUND):
            while True:
                health = (await client.get("/health")).json()
                idle = health.get("running", 0) == 0 and health.get("queued", 0) == 0
                if idle and _cancelled(engine) == cancelled:
                    return
                await anyio.sleep(0.02)


async def _running(engine: Engine) -> None:
    with anyio.fail_after(FREED_BOUND):
        while engine.statistics().running < 1:  # noqa: ASYNC110 - a run announces nothing
            await anyio.sleep(_POLL)


async def _abandon(
    base_url: str, engine: Engine, send: Callable[[httpx.AsyncClient], Awaitable[Any]]
) -> None:
    """Send, and hang up unanswered once the run holds a worker."""
    answered: list[Any] = []
    headers = {"Api-Key": ALICE}
    async with (
        httpx.AsyncClient(base_url=base_url, headers=headers, timeout=FREED_BOUND) as client,
        anyio.create_task_group() as tg,
    ):

        async def request() -> None:
            answered.append(await send(client))

        tg.start_soon(request)
        await _running(engine)
        tg.cancel_scope.cancel()  # the request's connection closes with it
    assert answered == []


async def _open(base_url: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, headers={"Api-Key": ALICE}) as client:
        opened = await client.post(f"{OPS}/open_session", json={})
        return str(opened.json()["sessionId"])


ROUTES: dict[str, Callable[[httpx.AsyncClient, str | None], Awaitable[Any]]] = {
    "execute": lambda c, sid: c.post("/v1/execute", json={"code": SPIN, "sessionId": sid}),
    "execute_stream": lambda c, sid: c.post(
        "/v1/execute", json={"code": SPIN, "sessionId": sid, "stream": True}
    ),
    "execute_code": lambda c, sid: c.post(
        f"{OPS}/execute_code", json={"code": SPIN, "sessionId": sid}
    ),
}


@pytest.fixture(scope="module")
async def gateway_url(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    data_dir = tmp_path_factory.mktemp("gateway")
    config = Config(mode="gateway", data_dir=data_dir, api_keys=KEYS, timeout=TIMEOUT)
    async with live(create_app(engine, config)) as base_url:
        yield base_url


@pytest.fixture(scope="module")
async def container_url(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    data_dir = tmp_path_factory.mktemp("container")
    config = Config(mode="container", data_dir=data_dir, timeout=TIMEOUT)
    async with live(create_app(engine, config)) as base_url:
        yield base_url


@pytest.mark.parametrize("in_session", [False, True], ids=["one-shot", "session"])
@pytest.mark.parametrize("route", list(ROUTES))
async def test_hanging_up_cancels_the_run(
    engine: Engine, gateway_url: str, route: str, in_session: bool
) -> None:
    before = _cancelled(engine)
    session_id = await _open(gateway_url) if in_session else None
    await _abandon(gateway_url, engine, lambda c: ROUTES[route](c, session_id))
    await _idle(gateway_url, engine, before + 1)
    if in_session:  # the session survives its cancelled run, with a fresh interpreter
        async with httpx.AsyncClient(base_url=gateway_url, headers={"Api-Key": ALICE}) as c:
            again = await c.post("/v1/execute", json={"code": "1+1", "sessionId": session_id})
            assert again.json()["result"] == {"text/plain": "2"}
    assert _cancelled(engine) == before + 1


async def test_hanging_up_cancels_in_container_mode(engine: Engine, container_url: str) -> None:
    before = _cancelled(engine)
    await _abandon(container_url, engine, lambda c: c.post("/execute_code", json={"code": SPIN}))
    await _idle(container_url, engine, before + 1)
    assert _cancelled(engine) == before + 1
