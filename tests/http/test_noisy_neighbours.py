"""One key attacking a real ``corral serve`` cannot hurt another key's service: fds stay
bounded, the process stays up, and what fails is one request, never the server."""

from __future__ import annotations

import contextlib
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


# the short noisy-neighbour soak (bench/soak.py runs the long one) ------------------------------

GUARD = """\
import os, socket
if (os.getpid() != 1
        or sorted(p for p in os.listdir('/proc') if p.isdigit()) != ['1']
        or socket.gethostname() != 'corral'):
    raise RuntimeError('refusing to run hostile code outside the corral sandbox')
print('sandbox confirmed', flush=True)
"""
"""Proves from inside that the sandbox is in effect before any hostile code runs."""

ATTACKS = {
    "fork bomb": "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory bomb": "hoard = []\nwhile True:\n    hoard.append(bytearray(64 * 1024 * 1024))\n",
    "output flood": "while True:\n    print('x' * 10000)\n",
    "stderr flood": "import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n",
    "busy loop": "while True:\n    pass\n",
    "fd hoard": "fds = []\nwhile True:\n    fds.append(os.open('/', os.O_RDONLY))\n",
}
VICTIM_RUNS = 60
VICTIM_CONCURRENCY = 4
_SETTLE = 30.0  # seconds for killed workers to be reaped and the pool to refill


async def _settled(condition: Any) -> None:
    with anyio.fail_after(_SETTLE):
        while not condition():  # noqa: ASYNC110 - reaping and refills signal nothing
            await anyio.sleep(0.1)


async def test_short_noisy_neighbour_soak(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server:
        baseline_fds = server.fds()
        baseline_processes = len(server.descendants())
        outcomes: list[str] = []
        attacks: list[tuple[str, str]] = []
        async with server.client(ALICE) as alice, server.client(CAROL) as carol:
            session = await _open_session(alice)
            made = await _execute(alice, MANY_DIRS, session)
            assert made["status"] == "SUCCESS", made
            victims_done = anyio.Event()

            async def attacker(names: list[str]) -> None:
                while not victims_done.is_set():
                    for name in names:
                        body = {"code": GUARD + ATTACKS[name], "timeout": 2.0}
                        response = await alice.post("/v1/execute", json=body)
                        assert response.status_code in (200, 503), (name, response.text)
                        if response.status_code == 200:
                            attacked = response.json()
                            assert "refusing to run hostile code" not in attacked["stderr"]
                            if attacked["stdout"].startswith("sandbox confirmed"):
                                attacks.append((name, attacked["outcome"]))  # it did run
                    walk = await alice.post(f"{OPS}/list_files", json={"sessionId": session})
                    assert walk.status_code == 200

            def attacked_enough() -> bool:
                return {name for name, _ in attacks} == set(ATTACKS)

            async def victim(count: int) -> None:
                i = 0
                while i < count or not attacked_enough():  # every attack meets victims
                    i += 1
                    response = await carol.post("/v1/execute", json={"code": f"print({i} * 2)"})
                    if response.status_code == 503:
                        outcomes.append("busy")
                        continue
                    result = response.json()
                    outcomes.append(result["outcome"])
                    if result["outcome"] == "ok":
                        assert result["stdout"] == f"{i * 2}\n"

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    names = sorted(ATTACKS)
                    tg.start_soon(attacker, names[::2])
                    tg.start_soon(attacker, names[1::2])
                    async with anyio.create_task_group() as victims:
                        for _ in range(VICTIM_CONCURRENCY):
                            victims.start_soon(victim, VICTIM_RUNS // VICTIM_CONCURRENCY)
                    victims_done.set()
            await alice.post(f"{OPS}/close_session", json={"sessionId": session})
        assert server.alive()
        assert {name for name, _ in attacks} == set(ATTACKS)  # every attack ran at least once
        assert len(outcomes) >= VICTIM_RUNS
        assert outcomes.count("ok") >= 0.95 * len(outcomes), outcomes
        assert set(outcomes) <= {"ok", "busy"}, outcomes
        await _settled(lambda: server.fds() <= baseline_fds + 4)
        await _settled(lambda: len(server.descendants()) <= baseline_processes)
        async with server.client(CAROL) as carol:
            assert (await carol.get("/health")).status_code == 200


SPARSE_BYTES = 60 * 1024 * 1024  # within the run's file-size rlimit; costs the session no disk
PARALLEL_DOWNLOADS = 6


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_parallel_downloads_of_a_sparse_file_keep_the_servers_memory_bounded(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path) as server, server.client(ALICE) as alice:
        session = await _open_session(alice)
        made = await _execute(
            alice, f"with open('sparse', 'wb') as f:\n    f.truncate({SPARSE_BYTES})\n", session
        )
        assert made["status"] == "SUCCESS", made
        baseline = _rss_bytes(server.pid)
        body = {"sessionId": session, "path": "sparse"}
        with anyio.fail_after(120):
            async with contextlib.AsyncExitStack() as stack:
                streams = [
                    await stack.enter_async_context(
                        alice.stream("POST", f"{OPS}/download_file", json=body)
                    )
                    for _ in range(PARALLEL_DOWNLOADS)
                ]
                # Every download has started and none is read: a server that buffers whole
                # files holds them all now.
                held = _rss_bytes(server.pid) - baseline
                assert all(s.status_code == 200 for s in streams)
                assert held < SPARSE_BYTES, f"{held} bytes held for {len(streams)} downloads"
                received = 0
                async for chunk in streams[0].aiter_bytes():
                    received += len(chunk)
                assert received == SPARSE_BYTES
        assert server.alive()
