"""HTTP/1.1 relayed a request at a time, for connections let out for a name.

A connection is judged by its first request's Host (``_sniff``), but a kept-alive connection
can send more, each with a Host of its own: on an address several sites share (a CDN), a
second request for a refused name would ride on the first's verdict, and with header rules
it would carry the first host's secret to the other. So every HTTP request of a connection
let out for a name is read (h11) and must ask for that name; one that asks for another gets
``421 Misdirected Request`` (RFC 9110 §15.5.20: "open a connection of your own") and the
connection ends. The headers of the name's rules are added to each request, replacing any the
code set of the same name.

``Expect: 100-continue`` is answered here, and the request goes upstream without it: the
body follows at once instead of after a client's timeout. An ``Upgrade`` (WebSocket over
``ws://``) the host accepts ends the relaying; the caller splices what follows as it is.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
import anyio.abc
import h11

from corral.network._sniff import request_name

__all__ = ["Prefixed", "Switched", "relay_http"]

_READ = 256 * 1024  # bytes per read: a relayed body is parsed a chunk at a time
_MAX_HEAD = 64 * 1024  # bytes of a request or response head h11 buffers
_MISDIRECTED = 421
_SWITCHING = 101
_CONTINUE = 100
_DROPPED = frozenset({b"expect"})  # answered here, never sent on


@dataclass(frozen=True, slots=True)
class Switched:
    """The host switched protocols: bytes each side sent past the switch, to pass on."""

    to_upstream: bytes
    to_sandbox: bytes


class Prefixed(anyio.abc.ByteStream):
    """A stream whose first bytes were read already (the peek): they come again first."""

    def __init__(self, first: bytes, stream: anyio.abc.ByteStream) -> None:
        self._first = first
        self._stream = stream

    async def receive(self, max_bytes: int = _READ) -> bytes:
        if self._first:
            data, self._first = self._first[:max_bytes], self._first[max_bytes:]
            return data
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


async def _next_event(connection: h11.Connection, stream: anyio.abc.ByteStream) -> h11.Event | None:
    """The next event, or None when h11 pauses (the peer may be switching protocols)."""
    while True:
        event = connection.next_event()
        if isinstance(event, h11.Event):
            return event
        if event is h11.PAUSED:
            return None
        try:
            data = await stream.receive(_READ)
        except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
            data = b""
        connection.receive_data(data)


async def _send(
    connection: h11.Connection,
    stream: anyio.abc.ByteStream,
    event: h11.Event,
    count: Callable[[int], bool] = lambda _size: True,
) -> bool:
    """Send ``event``, if ``count`` allows its bytes (False: it did not, nothing was sent)."""
    data = connection.send(event) or b""
    if not count(len(data)):
        return False
    if data:
        await stream.send(data)
    return True


def _onward(request: h11.Request, headers: Mapping[str, str]) -> h11.Request:
    replaced = {name.lower().encode() for name in headers} | _DROPPED
    kept = [(n, v) for n, v in request.headers if n.lower() not in replaced]
    added = [(name.encode(), value.encode()) for name, value in headers.items()]
    # h11 speaks HTTP/1.1 on each side and frames for a peer of 1.0 by itself.
    return h11.Request(method=request.method, target=request.target, headers=[*kept, *added])


def _as_ours(answer: h11.Event) -> h11.Event:
    """An upstream's answer, to send on: h11 sends only HTTP/1.1 heads, and says
    ``Connection: close`` when the host will close (an HTTP/1.0 host does), so the client
    sends its next request on a connection of its own."""
    if isinstance(answer, h11.InformationalResponse):
        return h11.InformationalResponse(
            status_code=answer.status_code, headers=answer.headers, reason=answer.reason
        )
    if isinstance(answer, h11.Response):
        headers = list(answer.headers)
        if answer.http_version != b"1.1":  # h11 closes after an HTTP/1.0 answer
            headers.append((b"connection", b"close"))
        return h11.Response(status_code=answer.status_code, headers=headers, reason=answer.reason)
    return answer


def _asked(request: h11.Request) -> str:
    host = next((value for key, value in request.headers if key == b"host"), None)
    return request_name(request.target, host)


async def _misdirected(
    inbound: h11.Connection, sandbox: anyio.abc.ByteStream, asked: str, name: str
) -> None:
    text = f"corral: this connection was let out for {name}; {asked or 'no host'} needs its own\n"
    body = text.encode()
    head = h11.Response(
        status_code=_MISDIRECTED,
        headers=[(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode()),
                 (b"connection", b"close")],
    )  # fmt: skip
    for event in (head, h11.Data(data=body), h11.EndOfMessage()):
        await _send(inbound, sandbox, event)


async def relay_http(
    sandbox: anyio.abc.ByteStream,
    upstream: anyio.abc.ByteStream,
    *,
    name: str,
    headers: Mapping[str, str],
    count: Callable[[int], bool],
) -> Switched | None:
    """Relay requests for ``name`` from ``sandbox`` to ``upstream`` with ``headers`` added,
    and their answers back, until either side ends, a request asks for another name, or
    ``count(bytes)`` (told every byte moved) returns False.

    Returns:
        What follows a protocol switch, for the caller to splice; None when relaying ended.
    """
    inbound = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
    outbound = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
    while True:
        try:
            event = await _next_event(inbound, sandbox)
        except h11.RemoteProtocolError:
            return None
        if event is None or isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, h11.Request):
            asked = _asked(event)
            if asked != name:
                await _misdirected(inbound, sandbox, asked, name)
                return None
            continuing = inbound.they_are_waiting_for_100_continue
            event = _onward(event, headers)
            if continuing:
                await _send(
                    inbound, sandbox, h11.InformationalResponse(status_code=_CONTINUE, headers=[])
                )
        try:
            if not await _send(outbound, upstream, event, count):
                return None
        except h11.LocalProtocolError:
            return None
        if not isinstance(event, h11.EndOfMessage):
            continue
        while True:  # the answer, until its end
            try:
                answer = await _next_event(outbound, upstream)
                if answer is None or isinstance(answer, h11.ConnectionClosed):
                    return None
                if not await _send(inbound, sandbox, _as_ours(answer), count):
                    return None
            except (h11.RemoteProtocolError, h11.LocalProtocolError):
                return None
            if isinstance(answer, h11.InformationalResponse) and answer.status_code == _SWITCHING:
                return Switched(inbound.trailing_data[0], outbound.trailing_data[0])
            if isinstance(answer, h11.EndOfMessage):
                break
        if inbound.our_state is h11.MUST_CLOSE or outbound.our_state is h11.MUST_CLOSE:
            return None
        try:
            inbound.start_next_cycle()
            outbound.start_next_cycle()
        except h11.LocalProtocolError:
            return None
