"""SIGTERM to a real ``corral serve``: no new work, runs in flight finish within the grace or
end ``cancelled``, every client gets a whole answer, and no process is left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.http.serverkit import ALICE, CAROL, running_server

pytestmark = [pytest.mark.anyio, pytest.mark.isolation, pytest.mark.network]

SHORT = "import time\ntime.sleep(0.5)\nprint('finished')"
LONG = "import time\nprint('started', flush=True)\ntime.sleep(60)"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped
    except FileNotFoundError:
        return True


def _in_place(health: httpx.Response) -> bool:
    load = health.json()
    return bool(load["queued"] >= 1 or load["session_runs"] >= 1)


async def _refused(url: str) -> bool:
    """Whether a new connection is refused (the listener closes first on a stop)."""
    try:
        async with httpx.AsyncClient(base_url=url) as fresh:
            await fresh.get("/health")
    except httpx.TransportError:
        return True
    return False


async def test_sigterm_lets_short_runs_finish_and_cancels_the_rest(tmp_path: Path) -> None:
    async with running_server(tmp_path, server_toml="shutdown_grace = 5.0") as server:
        answers: dict[str, httpx.Response] = {}
        async with server.client(ALICE) as alice, server.client(CAROL) as carol:
            session = (await alice.post("/v1/ops/code_interpreter/open_session", json={})).json()
            session_id = session["sessionId"]

            async def execute(name: str, client: httpx.AsyncClient, body: dict[str, Any]) -> None:
                answers[name] = await client.post("/v1/execute", json=body)

            async with anyio.create_task_group() as tg:
                tg.start_soon(execute, "long", alice, {"code": LONG})
                tg.start_soon(execute, "short", carol, {"code": SHORT})
                with anyio.fail_after(30):
                    while (await carol.get("/health")).json()["running"] < 2:  # noqa: ASYNC110
                        await anyio.sleep(0.02)  # a condition poll: runs announce nothing
                # Capacity is two: the session run waits for a worker, or runs beside them
                # where the session has a cgroup of its own (it takes no slot then).
                tg.start_soon(execute, "queued", alice, {"code": LONG, "sessionId": session_id})
                with anyio.fail_after(30):
                    while not _in_place(await carol.get("/health")):  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                processes = server.descendants()
                assert processes  # zygotes, workers, the session's holder
                os.kill(server.pid, signal.SIGTERM)
                with anyio.fail_after(5):
                    while not await _refused(server.url):  # noqa: ASYNC110 - nothing to wait on
                        await anyio.sleep(0.05)
        assert await anyio.to_thread.run_sync(server.stop) == 0
    short = answers["short"]
    assert (short.status_code, short.json()["outcome"]) == (200, "ok")  # within the grace
    assert short.json()["stdout"] == "finished\n"
    for name in ("long", "queued"):
        answer = answers[name]
        assert answer.status_code == 200, (name, answer.text)
        result = answer.json()
        assert result["outcome"] == "cancelled", (name, result)
        assert "the server is shutting down" in result["message"], (name, result)
    left = [pid for pid in processes if not _gone(pid)]
    assert left == []
