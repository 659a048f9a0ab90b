"""A closed connection cancels its run on every route: real server, real sockets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import ALICE, OPS
from tests.http.livekit import live

pytestmark = [pytest.mark.anyio, pytest.mark.network]

SPIN = "while True: pass"
GIVE_UP = 0.5  # seconds the client waits for an answer before it hangs up
FREED_BOUND = 15.0  # seconds; the run's own deadline is 20 s, so freeing proves cancellation


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


async def _abandon(base_url: str, send: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> None:
    headers = {"Api-Key": ALICE}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=GIVE_UP) as client:
        with pytest.raises(httpx.ReadTimeout):
            await send(client)


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


@pytest.mark.parametrize("in_session", [False, True], ids=["one-shot", "session"])
@pytest.mark.parametrize("route", list(ROUTES))
async def test_hanging_up_cancels_the_run(
    engine: Engine, gateway_config: Config, route: str, in_session: bool
) -> None:
    app = create_app(engine, gateway_config)
    before = _cancelled(engine)
    async with live(app) as base_url:
        session_id = await _open(base_url) if in_session else None
        await _abandon(base_url, lambda c: ROUTES[route](c, session_id))
        await _idle(base_url, engine, before + 1)
        if in_session:  # the session survives its cancelled run, with a fresh interpreter
            async with httpx.AsyncClient(base_url=base_url, headers={"Api-Key": ALICE}) as c:
                again = await c.post("/v1/execute", json={"code": "1+1", "sessionId": session_id})
                assert again.json()["result"] == {"text/plain": "2"}
    assert _cancelled(engine) == before + 1


async def test_hanging_up_cancels_in_container_mode(
    engine: Engine, container_config: Config
) -> None:
    app = create_app(engine, container_config)
    before = _cancelled(engine)
    async with live(app) as base_url:
        await _abandon(base_url, lambda c: c.post("/execute_code", json={"code": SPIN}))
        await _idle(base_url, engine, before + 1)
    assert _cancelled(engine) == before + 1
