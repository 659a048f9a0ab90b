"""HTTP relayed a request at a time, tried against real loopback HTTP servers (http.server,
of HTTP/1.1 and of HTTP/1.0): the sandbox's end is one side of a socket pair, spoken to with
h11 as a client would."""

from __future__ import annotations

import http.server
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.abc
import h11
import pytest

from corral.network._relay import relay_http

pytestmark = pytest.mark.anyio

SECRET = "Bearer injected-" + "5e" * 16
WAIT_SECONDS = 10  # the bound on every exchange; each takes milliseconds
BIG = 1 << 20  # bytes of /big's answer

T = TypeVar("T")


@dataclass(frozen=True)
class Seen:
    """One request as the upstream server read it."""

    method: str
    path: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes
    peer_port: int

    def values(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]


class Upstream(http.server.ThreadingHTTPServer):
    seen: list[Seen]
    arrived: threading.Condition

    def wait_for(self, count: int) -> list[Seen]:
        """The requests seen, once there are ``count`` (its handler threads run on their own)."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.seen) >= count, WAIT_SECONDS)
            return list(self.seen)

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a relay cut mid-answer, as some tests mean it to
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Upstream

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        seen = Seen(
            method=self.command,
            path=self.path,
            version=self.request_version,
            headers=list(self.headers.items()),
            body=body,
            peer_port=self.client_address[1],
        )
        with self.server.arrived:
            self.server.seen.append(seen)
            self.server.arrived.notify_all()
        content = b"x" * BIG if self.path == "/big" else f"seen {self.path}\n".encode()
        self.send_response(200)
        if self.path != "/until-close":
            self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the test reads what the server saw from Upstream.seen


class _Handler10(_Handler):
    protocol_version = "HTTP/1.0"  # answers with HTTP/1.0 heads, one request a connection


class _Handler11(_Handler):
    protocol_version = "HTTP/1.1"


def _serve(handler: type[_Handler]) -> Iterator[Upstream]:
    server = Upstream(("127.0.0.1", 0), handler)
    server.seen = []
    server.arrived = threading.Condition()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT_SECONDS)


@pytest.fixture(scope="module")
def _upstream11() -> Iterator[Upstream]:
    yield from _serve(_Handler11)


@pytest.fixture(scope="module")
def _upstream10() -> Iterator[Upstream]:
    yield from _serve(_Handler10)


@pytest.fixture
def upstream(_upstream11: Upstream) -> Upstream:
    _upstream11.seen.clear()
    return _upstream11


@pytest.fixture
def upstream10(_upstream10: Upstream) -> Upstream:
    _upstream10.seen.clear()
    return _upstream10


@dataclass
class Answer:
    status: int
    version: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    whole: bool
    """Whether the answer ended as its framing says (not cut by the connection's end)."""


@dataclass
class Client:
    """The sandbox's code: an HTTP/1.1 client on its end of the pair."""

    stream: anyio.abc.ByteStream
    relay_ended: anyio.Event
    connection: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))

    async def request(
        self,
        target: str,
        *,
        method: str = "GET",
        headers: list[tuple[str, str]] | None = None,
        body: bytes = b"",
        host: str = "inject.test",
    ) -> Answer:
        if self.connection.our_state is h11.DONE:
            self.connection.start_next_cycle()
        sent = [("Host", host), *(headers or [])]
        if body:
            sent.append(("Content-Length", str(len(body))))
        events: list[h11.Event] = [h11.Request(method=method, target=target, headers=sent)]
        if body:
            events.append(h11.Data(data=body))
        events.append(h11.EndOfMessage())
        for event in events:
            await self.stream.send(self.connection.send(event) or b"")
        return await self._answer()

    async def _answer(self) -> Answer:
        head: h11.Response | None = None
        body = b""
        while True:
            try:
                event = self.connection.next_event()
            except h11.RemoteProtocolError:  # the connection ended mid-answer
                return _cut(head, body)
            if event is h11.NEED_DATA:
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = b""
                try:
                    self.connection.receive_data(data)
                except RuntimeError:
                    return _cut(head, body)
                continue
            if isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Answer(head.status_code, head.http_version, list(head.headers), body, True)
            elif isinstance(event, h11.ConnectionClosed | h11.PAUSED):
                return _cut(head, body)


def _cut(head: h11.Response | None, body: bytes) -> Answer:
    if head is None:
        return Answer(0, b"", [], body, False)
    return Answer(head.status_code, head.http_version, list(head.headers), body, False)


async def through_relay(
    server: Upstream,
    talk: Callable[[Client], Awaitable[T]],
    *,
    headers: dict[str, str] | None = None,
    count: Callable[[int], bool] | None = None,
) -> T:
    """``talk`` as the sandbox, with ``forward_with_headers`` between it and ``server``."""
    mine, theirs = socket.socketpair()
    client_end = await anyio.abc.UNIXSocketStream.from_socket(mine)
    sandbox_end = await anyio.abc.UNIXSocketStream.from_socket(theirs)
    ended = anyio.Event()
    client = Client(client_end, ended)

    async def relay() -> None:
        upstream_end = await anyio.connect_tcp("127.0.0.1", server.server_address[1])
        try:
            await relay_http(
                sandbox_end,
                upstream_end,
                name="inject.test",
                headers={"Authorization": SECRET} if headers is None else headers,
                count=count or (lambda _moved: True),
            )
        finally:
            ended.set()
            await upstream_end.aclose()
            await sandbox_end.aclose()

    with anyio.fail_after(WAIT_SECONDS):
        async with client_end, anyio.create_task_group() as group:
            group.start_soon(relay)
            result = await talk(client)
            await client_end.send_eof()  # the sandbox is done: the relay ends with it
            await ended.wait()
    return result


# the relay --------------------------------------------------------------------------------


async def test_the_injected_header_reaches_the_server(upstream: Upstream) -> None:
    async def talk(client: Client) -> Answer:
        return await client.request("/first", headers=[("Accept", "*/*")])

    answer = await through_relay(upstream, talk)
    assert (answer.status, answer.body, answer.whole) == (200, b"seen /first\n", True)
    (seen,) = upstream.seen
    assert seen.values("Authorization") == [SECRET]
    assert seen.values("Accept") == ["*/*"]
    assert seen.values("Host") == ["inject.test"]
    assert SECRET.encode() not in b"".join(v for _, v in answer.headers) + answer.body


async def test_a_header_the_client_sent_of_the_same_name_is_replaced(upstream: Upstream) -> None:
    async def talk(client: Client) -> Answer:
        sent = [("authorization", "Bearer the-codes-own"), ("AUTHORIZATION", "another")]
        return await client.request("/", headers=[*sent, ("X-Kept", "yes")])

    await through_relay(upstream, talk, headers={"Authorization": SECRET, "X-Second": "2"})
    (seen,) = upstream.seen
    assert seen.values("Authorization") == [SECRET]
    assert seen.values("X-Second") == ["2"]
    assert seen.values("X-Kept") == ["yes"]


async def test_every_request_of_a_kept_alive_connection_gets_the_header(
    upstream: Upstream,
) -> None:
    async def talk(client: Client) -> list[Answer]:
        return [await client.request(path) for path in ("/one", "/two", "/three")]

    answers = await through_relay(upstream, talk)
    assert [a.body for a in answers] == [b"seen /one\n", b"seen /two\n", b"seen /three\n"]
    assert [s.path for s in upstream.seen] == ["/one", "/two", "/three"]
    assert all(s.values("Authorization") == [SECRET] for s in upstream.seen)
    assert len({s.peer_port for s in upstream.seen}) == 1  # one upstream connection


async def test_a_post_body_passes_intact(upstream: Upstream) -> None:
    body = bytes(range(256)) * 1024  # 256 KiB, every byte value, more than one read

    async def talk(client: Client) -> Answer:
        return await client.request("/upload", method="POST", body=body)

    answer = await through_relay(upstream, talk)
    assert answer.status == 200
    (seen,) = upstream.seen
    assert (seen.method, seen.body) == ("POST", body)
    assert seen.values("Authorization") == [SECRET]


@pytest.mark.parametrize("path", ["/sized", "/until-close"])
async def test_an_http_1_0_hosts_answer_reaches_the_client(upstream10: Upstream, path: str) -> None:
    async def talk(client: Client) -> Answer:
        return await client.request(path)

    answer = await through_relay(upstream10, talk)
    assert (answer.status, answer.body, answer.whole) == (200, f"seen {path}\n".encode(), True)
    assert answer.version == b"1.1"  # h11 speaks 1.1 to the client, framing it itself
    (seen,) = upstream10.seen
    assert seen.values("Authorization") == [SECRET]


async def test_a_large_answer_arrives_whole_and_every_byte_is_counted(upstream: Upstream) -> None:
    async def talk(client: Client) -> Answer:
        return await client.request("/big")

    moved: list[int] = []

    def count(size: int) -> bool:
        moved.append(size)
        return True

    answer = await through_relay(upstream, talk, count=count)
    assert (len(answer.body), answer.whole) == (BIG, True)
    assert sum(moved) > BIG


async def test_count_returning_false_stops_the_relay(upstream: Upstream) -> None:
    budget = 64 * 1024
    total = 0

    def count(size: int) -> bool:
        nonlocal total
        total += size
        return total <= budget

    async def talk(client: Client) -> Answer:
        answer = await client.request("/big")
        await client.relay_ended.wait()  # it ended by itself, before the sandbox was done
        return answer

    answer = await through_relay(upstream, talk, count=count)
    assert not answer.whole
    assert len(answer.body) <= budget


async def test_count_refusing_the_request_sends_nothing_either_way(upstream: Upstream) -> None:
    async def talk(client: Client) -> Answer:
        return await client.request("/")

    answer = await through_relay(upstream, talk, count=lambda _size: False)
    assert (answer.status, answer.whole) == (0, False)
    assert upstream.seen == []  # counted before it is sent: a refused request never goes


async def test_a_client_speaking_no_http_ends_the_relay(upstream: Upstream) -> None:
    async def talk(client: Client) -> bytes:
        await client.stream.send(b"\x00\x01 this is no request\r\n\r\n")
        await client.relay_ended.wait()
        return b""

    await through_relay(upstream, talk)
    assert upstream.seen == []


async def test_a_request_for_another_host_on_the_same_connection_is_misdirected(
    upstream: Upstream,
) -> None:
    async def talk(client: Client) -> list[Answer]:
        first = await client.request("/mine")
        other = await client.request("/theirs", host="elsewhere.test")
        await client.relay_ended.wait()
        return [first, other]

    first, other = await through_relay(upstream, talk)
    assert first.body == b"seen /mine\n"
    assert other.status == 421
    assert b"elsewhere.test needs its own" in other.body
    assert [s.path for s in upstream.seen] == ["/mine"]  # the second never went out
    assert SECRET.encode() not in other.body


async def test_an_absolute_target_names_its_host_over_the_host_header(
    upstream: Upstream,
) -> None:
    async def talk(client: Client) -> Answer:
        answer = await client.request("http://elsewhere.test/x")
        await client.relay_ended.wait()
        return answer

    answer = await through_relay(upstream, talk)
    assert answer.status == 421
    assert upstream.seen == []


async def test_expect_100_continue_is_answered_and_not_sent_on(upstream: Upstream) -> None:
    body = b"y" * 4096

    async def talk(client: Client) -> list[int]:
        head = h11.Request(
            method="POST",
            target="/upload",
            headers=[("Host", "inject.test"), ("Content-Length", str(len(body))),
                     ("Expect", "100-continue")],
        )  # fmt: skip
        await client.stream.send(client.connection.send(head) or b"")
        statuses = []
        while True:  # the body goes only once the relay says to continue
            event = client.connection.next_event()
            if event is h11.NEED_DATA:
                client.connection.receive_data(await client.stream.receive())
                continue
            assert isinstance(event, h11.InformationalResponse)
            statuses.append(event.status_code)
            break
        for event in (h11.Data(data=body), h11.EndOfMessage()):
            await client.stream.send(client.connection.send(event) or b"")
        answer = await client._answer()
        return [*statuses, answer.status]

    assert await through_relay(upstream, talk) == [100, 200]
    (seen,) = upstream.seen
    assert seen.body == body
    assert seen.values("Expect") == []


async def test_a_protocol_switch_hands_back_what_follows() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610 - anyio's

    async def host(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            await stream.send(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n"
                b"Connection: Upgrade\r\n\r\nfrom the host"
            )

    mine, theirs = socket.socketpair()
    async with (
        listener,
        anyio.create_task_group() as group,
        await anyio.abc.UNIXSocketStream.from_socket(mine) as client_end,
        await anyio.abc.UNIXSocketStream.from_socket(theirs) as sandbox_end,
    ):
        group.start_soon(listener.serve, host)
        with anyio.fail_after(WAIT_SECONDS):
            await client_end.send(
                b"GET /ws HTTP/1.1\r\nHost: inject.test\r\nUpgrade: echo\r\n"
                b"Connection: Upgrade\r\n\r\nfrom the sandbox"
            )
            async with await anyio.connect_tcp("127.0.0.1", port) as upstream_end:
                switched = await relay_http(
                    sandbox_end, upstream_end, name="inject.test", headers={},
                    count=lambda _moved: True,
                )  # fmt: skip
            answer = await client_end.receive()
        group.cancel_scope.cancel()
    assert switched is not None
    assert answer.startswith(b"HTTP/1.1 101 ")
    assert (switched.to_upstream, switched.to_sandbox) == (b"from the sandbox", b"from the host")
