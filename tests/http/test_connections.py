"""Slow and greedy clients against a real ``corral serve``: half-sent heads are cut off after
``header_timeout``, one address holds at most ``max_connections_per_client`` connections, and
``X-Forwarded-For`` names the client only when a trusted proxy sends it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from corral.http._connections import ConnectionGuard
from tests.http.serverkit import ALICE, Server, running_server


def test_the_guard_counts_peer_addresses_and_never_a_trusted_proxy() -> None:
    guard = ConnectionGuard(header_timeout=1, max_per_client=2, trusted=["10.0.0.0/8"])
    # IPv4 peers of a dual-stack listener arrive IPv4-mapped: the same address, the same trust.
    assert guard.key_of("::ffff:192.0.2.1") == guard.key_of("192.0.2.1") == "192.0.2.1"
    assert guard.key_of("10.1.2.3") is guard.key_of("::ffff:10.1.2.3") is None
    assert guard.key_of("/run/corral.sock") is None  # not an IP peer: nothing to count
    assert [guard.admit("192.0.2.1") for _ in range(3)] == [True, True, False]
    assert guard.admit("192.0.2.2")  # another address is counted apart
    guard.release("192.0.2.1")
    assert guard.admit("192.0.2.1")
    assert not guard.admit("192.0.2.1")


HEADER_TIMEOUT = 3.0  # seconds: small, so the test waits little for the server to cut
SLOW_CLIENTS = 300
HALF_A_HEAD = b"GET /health HTTP/1.1\r\nHost: corral\r\nX-Slow: "
HEALTH = b"GET /health HTTP/1.1\r\nHost: corral\r\n\r\n"
_SETTLE = 30.0  # seconds for the server to accept or release a burst of connections
_CUT = HEADER_TIMEOUT + 30.0  # seconds within which a slow connection must have been closed
_FD_NOISE = 16  # descriptors the server's own pool and pipes may hold more or less meanwhile


def _address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


async def _connect(server: Server, source: str = "127.0.0.1") -> anyio.abc.SocketStream:
    host, port = _address(server)
    return await anyio.connect_tcp(host, port, local_host=source)


async def _closed_by_server(stream: anyio.abc.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
        while True:
            received += await stream.receive()
    return received


async def _answer(stream: anyio.abc.SocketStream) -> bytes:
    """One whole response on a kept-alive connection (its head and its announced body)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += await stream.receive()
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive()
    return head + b"\r\n\r\n" + body


async def _until(condition: Any) -> None:
    with anyio.fail_after(_SETTLE):
        while not condition():  # noqa: ASYNC110 - accepts and closes signal nothing
            await anyio.sleep(0.05)


@pytest.mark.anyio
@pytest.mark.network
@pytest.mark.isolation
async def test_a_slowloris_is_cut_off_while_the_server_keeps_answering(tmp_path: Path) -> None:
    toml = f"header_timeout = {HEADER_TIMEOUT}\n"
    async with running_server(tmp_path, server_toml=toml) as server, server.client(ALICE) as alice:
        kept = await _connect(server)  # a keep-alive client idle between two requests
        await kept.send(HEALTH)
        assert (await _answer(kept)).startswith(b"HTTP/1.1 200")
        baseline = server.fds()
        async with contextlib.AsyncExitStack() as stack:
            slow = [await stack.enter_async_context(await _connect(server)) for _ in range(3)]
            await slow[0].send(HALF_A_HEAD)  # half a first head
            # slow[1] sends nothing at all; slow[2] sends half of a second head after a first
            await slow[2].send(HEALTH)
            assert (await _answer(slow[2])).startswith(b"HTTP/1.1 200")
            await slow[2].send(HALF_A_HEAD)
            for _ in range(SLOW_CLIENTS):
                stream = await stack.enter_async_context(await _connect(server))
                await stream.send(HALF_A_HEAD)
                slow.append(stream)
            await _until(lambda: server.fds() >= baseline + len(slow) - _FD_NOISE)
            with anyio.fail_after(2):  # a bound on the wait, not a speed assertion
                health = await alice.get("/health")
            assert health.status_code == 200, health.text
            with anyio.fail_after(60):
                ran = await alice.post("/v1/execute", json={"code": "print('served')"})
            assert ran.json()["stdout"] == "served\n", ran.text
            cut: list[bytes] = []

            async def watch(stream: anyio.abc.SocketStream) -> None:
                cut.append(await _closed_by_server(stream))

            with anyio.fail_after(_CUT):
                async with anyio.create_task_group() as tg:
                    for stream in slow:
                        tg.start_soon(watch, stream)
        assert cut == [b""] * len(slow)  # closed, and nothing said to a head never finished
        await _until(lambda: server.fds() <= baseline + _FD_NOISE)
        # The keep-alive client idled past the head timeout, which bounds heads, not idling.
        await kept.send(HEALTH)
        assert (await _answer(kept)).startswith(b"HTTP/1.1 200")
        await kept.aclose()


BOUND = 8
PROXY = "127.0.0.3"


async def _served(server: Server, source: str) -> anyio.abc.SocketStream:
    stream = await _connect(server, source)
    await stream.send(HEALTH)
    assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
    return stream


@pytest.mark.anyio
@pytest.mark.network
@pytest.mark.isolation
async def test_connections_per_address_are_bounded(tmp_path: Path) -> None:
    toml = f'max_connections_per_client = {BOUND}\ntrusted_proxies = ["{PROXY}"]\n'
    async with (
        running_server(tmp_path, server_toml=toml) as server,
        server.client(ALICE) as alice,
        contextlib.AsyncExitStack() as stack,
    ):
        held = [await _served(server, "127.0.0.2") for _ in range(BOUND)]
        for stream in held:
            stack.push_async_callback(stream.aclose)
        async with await _connect(server, "127.0.0.2") as refused:
            answer = await _closed_by_server(refused)
        assert answer.startswith(b"HTTP/1.1 429 "), answer
        assert answer.endswith(b"Too many connections from this address")
        # Another address is not affected, nor is a trusted proxy, which is not counted.
        assert (await alice.get("/health")).status_code == 200
        for _ in range(BOUND + 2):
            stack.push_async_callback((await _served(server, PROXY)).aclose)
        # A connection that closes frees its place.
        await held.pop().aclose()
        with anyio.fail_after(_SETTLE):
            while True:
                stream = await _connect(server, "127.0.0.2")
                answer = await _head(stream, HEALTH)
                if answer.startswith(b"HTTP/1.1 200"):
                    stack.push_async_callback(stream.aclose)
                    break
                await stream.aclose()
                await anyio.sleep(0.05)  # the server has not seen the close yet


async def _head(stream: anyio.abc.SocketStream, request: bytes) -> bytes:
    """The first bytes of the answer to ``request`` (a refusal is said and the connection
    closed, perhaps before the request arrives; a 200 keeps the connection)."""
    try:
        await stream.send(request)
        return await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""


# X-Forwarded-For -----------------------------------------------------------------------------

_QUEUED_LIMIT = "too many runs waiting for this caller"


def _run_code(forwarded_for: str | None) -> dict[str, Any]:
    headers = {} if forwarded_for is None else {"X-Forwarded-For": forwarded_for}
    body = {"code": "print(1)", "language": "python", "compile_timeout": 50, "run_timeout": 5}
    return {"json": body, "headers": headers}


@contextlib.asynccontextmanager
async def _from(server: Server, source: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(base_url=server.url, transport=transport, timeout=90) as client:
        yield client


@pytest.mark.anyio
@pytest.mark.network
@pytest.mark.isolation
async def test_forwarded_for_names_the_tenant_only_from_a_trusted_proxy(tmp_path: Path) -> None:
    """Open mode's tenant is the client address, and each tenant may have one run waiting:
    two waiting runs from one peer that differ only in the header show whether it counted."""
    toml = (
        'open_run_code = true\ntrusted_proxies = ["127.0.0.2"]\n'
        "[engine]\nmax_queued_per_key = 1\ntimeout = 60\n"
    )
    async with (
        running_server(tmp_path, server_toml=toml, capacity=1) as server,
        server.client(ALICE) as alice,
        _from(server, "127.0.0.1") as untrusted,
        _from(server, "127.0.0.2") as proxy,
        anyio.create_task_group() as tg,
    ):

        async def load() -> dict[str, Any]:
            health: dict[str, Any] = (await alice.get("/health")).json()
            return health

        async def queued(count: int) -> None:
            with anyio.fail_after(_SETTLE):
                while (await load())["queued"] < count:  # noqa: ASYNC110 - a condition poll
                    await anyio.sleep(0.05)

        # The one worker is held, so every /run_code below waits (or is refused at once).
        tg.start_soon(
            lambda: alice.post("/v1/execute", json={"code": "import time; time.sleep(50)"})
        )
        with anyio.fail_after(_SETTLE):
            while (await load())["running"] < 1:  # noqa: ASYNC110 - a condition poll
                await anyio.sleep(0.05)
        tg.start_soon(lambda: untrusted.post("/run_code", **_run_code("10.0.0.1")))
        await queued(1)
        spoofed = await untrusted.post("/run_code", **_run_code("10.0.0.2"))
        assert spoofed.status_code == 504, spoofed.text  # the same tenant: its one slot is taken
        assert _QUEUED_LIMIT in json.loads(spoofed.text)["detail"]

        tg.start_soon(lambda: proxy.post("/run_code", **_run_code("10.0.0.3")))
        await queued(2)  # a tenant of its own: 10.0.0.3
        tg.start_soon(lambda: proxy.post("/run_code", **_run_code("10.0.0.4")))
        await queued(3)  # and another, 10.0.0.4
        again = await proxy.post("/run_code", **_run_code("10.0.0.3"))
        assert again.status_code == 504, again.text
        assert _QUEUED_LIMIT in json.loads(again.text)["detail"]
        tg.cancel_scope.cancel()  # closed connections cancel the waiting and the held run
