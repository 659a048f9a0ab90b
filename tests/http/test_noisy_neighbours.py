"""One key attacking a real ``corral serve`` cannot hurt another key's service: fds stay
bounded, the process stays up, and what fails is one request, never the server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.http.httpkit import OPS
from tests.http.serverkit import ALICE, CAROL, Server, running_server

pytestmark = [pytest.mark.anyio, pytest.mark.isolation, pytest.mark.network]

MANY_DIRS = "import os\nfor i in range(30000):\n    os.makedirs(f'v/{i}')\n"
_FD_HEADROOM = 200  # descriptors the server may add under load: sockets, pipes, workers


async def _open_session(client: httpx.AsyncClient) -> str:
    response = await client.post(f"{OPS}/open_session", json={})
    assert response.status_code == 200, response.text
    return str(response.json()["sessionId"])


async def _execute(
    client: httpx.AsyncClient, code: str, session_id: str | None = None
) -> dict[str, Any]:
    body = {"code": code} if session_id is None else {"code": code, "sessionId": session_id}
    response = await client.post(f"{OPS}/execute_code", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


class FdWatch:
    """The most descriptors the server held while the watch ran."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.most = server.fds()

    async def run(self) -> None:
        while True:
            self.most = max(self.most, self.server.fds())
            await anyio.sleep(0.005)  # a sampling interval, not a wait for anything


async def test_listing_a_30000_folder_session_keeps_fds_bounded(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as server,
        server.client(ALICE) as alice,
        server.client(CAROL) as carol,
    ):
        session = await _open_session(alice)
        made = await _execute(alice, MANY_DIRS, session)
        assert made["status"] == "SUCCESS", made
        baseline = server.fds()
        watch = FdWatch(server)
        listings: list[httpx.Response] = []
        served: list[dict[str, Any]] = []

        async def list_files() -> None:
            body = {"sessionId": session}
            listings.append(await alice.post(f"{OPS}/list_files", json=body))

        async def neighbour() -> None:
            for i in range(6):
                served.append(await _execute(carol, f"print({i})"))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch.run)
                async with anyio.create_task_group() as work:
                    for _ in range(8):
                        work.start_soon(list_files)
                    work.start_soon(neighbour)
                tg.cancel_scope.cancel()
        assert [r.status_code for r in listings] == [200] * 8
        assert all(r.json() == {"files": []} for r in listings)  # folders only, no files
        assert [r["stdout"] for r in served] == [f"{i}\n" for i in range(6)]
        assert watch.most < baseline + _FD_HEADROOM, (baseline, watch.most)
        assert server.alive()
        assert (await carol.get("/health")).status_code == 200


async def test_descriptor_exhaustion_fails_requests_never_the_server(tmp_path: Path) -> None:
    limit = 256
    async with running_server(tmp_path, nofile=limit) as server, server.client(CAROL) as carol:
        first = await _execute(carol, "print('warm')")  # keeps its connection alive
        assert first["stdout"] == "warm\n"
        assert server.fds() < limit - 64, server.fds()
        hogs: list[socket.socket] = []
        try:
            host, port = server.url.removeprefix("http://").split(":")
            for _ in range(limit + 64):  # more than the server can take: it hits EMFILE
                hogs.append(socket.create_connection((host, int(port)), timeout=5))
            with anyio.fail_after(30):
                while server.fds() < limit - 4:  # noqa: ASYNC110 - the server accepts them
                    await anyio.sleep(0.02)
            answers = set()
            for i in range(6):  # workers, pipes and refills now all meet EMFILE
                response = await carol.post("/v1/execute", json={"code": f"print({i})"})
                assert response.status_code in (200, 503), response.text
                answers.add(response.json()["outcome"] if response.status_code == 200 else 503)
                assert server.alive()
            assert answers <= {"ok", "worker_error", 503}, answers
        finally:
            for hog in hogs:
                hog.close()
        assert server.alive()
        with anyio.fail_after(60):
            while True:  # the pool refills after its backoff once descriptors are free
                result = await _execute(carol, "print('recovered')")
                if result["status"] == "SUCCESS":
                    break
                await anyio.sleep(0.2)
        assert result["stdout"] == "recovered\n"
        assert (await carol.get("/health")).status_code == 200
