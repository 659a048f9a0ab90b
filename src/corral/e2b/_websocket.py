"""A WebSocket into a sandbox's port: the client's, accepted by uvicorn, relayed message by
message to one the proxy opens to the sandbox's server (``websockets``' sans-I/O client).

The client is accepted only once the server inside has accepted the proxy, with the
subprotocol the server chose; a server that refuses has its status relayed (ASGI's
``websocket.http.response``). Messages are reassembled from the server's frames and bounded
by ``MAX_MESSAGE``; pings are answered by the protocol; a close on either side closes the
other with its code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from starlette.responses import Response as HTTPResponse
from starlette.types import Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from corral.network import InsideStream

__all__ = ["MAX_MESSAGE", "proxy_websocket", "refuse_websocket"]

MAX_MESSAGE = 16 * 1024 * 1024  # bytes of one message either way (uvicorn's own bound)
_CHUNK = 64 * 1024
_NO_STATUS = 1005  # a close frame without a code
_HANDSHAKE_SECONDS = 10.0  # for the server inside to answer the upgrade
_BAD_GATEWAY, _SWITCHING, _MIN_STATUS, _MAX_STATUS = 502, 101, 200, 599
_GOING_AWAY = 1001
_SKIPPED = frozenset({
    b"host", b"connection", b"upgrade", b"sec-websocket-key", b"sec-websocket-version",
    b"sec-websocket-extensions", b"sec-websocket-protocol",
})  # fmt: skip


async def refuse_websocket(scope: Scope, send: Send, response: HTTPResponse) -> None:
    """Refuse before accepting: ``response`` as the HTTP answer where the server offers
    ASGI's ``websocket.http.response``, else a plain close (403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(k, v) for k, v in response.raw_headers if k != b"content-length"]
    await send({"type": "websocket.http.response.start", "status": response.status_code,
                "headers": headers})  # fmt: skip
    await send({"type": "websocket.http.response.body", "body": bytes(response.body)})


def _protocol(scope: Scope) -> ClientProtocol:
    path = scope.get("raw_path") or scope["path"].encode()
    query = b"?" + scope["query_string"] if scope.get("query_string") else b""
    uri = parse_uri("ws://localhost" + (path + query).decode("latin-1"))
    offered = [Subprotocol(p) for p in scope.get("subprotocols", [])]
    return ClientProtocol(uri, subprotocols=offered or None, max_size=MAX_MESSAGE)


async def _handshake(
    scope: Scope,
    protocol: ClientProtocol,
    stream: InsideStream,
    forwarded: list[tuple[bytes, bytes]],
) -> Response | None:
    request = protocol.connect()
    for key, value in forwarded:
        if key not in _SKIPPED:
            request.headers[key.decode("latin-1")] = value.decode("latin-1")
    host = dict(scope["headers"]).get(b"host")
    if host is not None:
        request.headers.pop("Host", None)
        request.headers["Host"] = host.decode("latin-1")
    protocol.send_request(request)
    await stream.send(b"".join(protocol.data_to_send()))
    # A refusal (403, 404) leaves the state CONNECTING until the server hangs up, and a
    # server that keeps the connection would hold it to the timeout: its answer is in now.
    while protocol.state is State.CONNECTING and protocol.handshake_exc is None:
        try:
            data = await stream.receive(_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            protocol.receive_eof()
            break
        protocol.receive_data(data)
    for event in protocol.events_received():
        if isinstance(event, Response):
            return event
    return None


async def proxy_websocket(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: InsideStream,
    count: Callable[[int], None],
    forwarded: list[tuple[bytes, bytes]],
) -> None:
    protocol = _protocol(scope)
    response: Response | None = None
    with anyio.move_on_after(_HANDSHAKE_SECONDS):
        response = await _handshake(scope, protocol, stream, forwarded)
    if protocol.state is not State.OPEN:
        # The server's refusal relayed, if it is one a client can be given.
        status = response.status_code if response is not None else _BAD_GATEWAY
        if not _MIN_STATUS <= status <= _MAX_STATUS or status == _SWITCHING:
            status = _BAD_GATEWAY
        body = bytes(response.body or b"") if response is not None else b""
        await refuse_websocket(scope, send, HTTPResponse(body, status_code=status))
        return
    if (await receive())["type"] != "websocket.connect":
        return
    chosen = Headers(response.headers if response is not None else {}).get("Sec-WebSocket-Protocol")
    await send({"type": "websocket.accept", "subprotocol": chosen})
    async with anyio.create_task_group() as tg:
        # Either side's end ends both: the client gone, nothing of the server's is for anyone.
        tg.start_soon(_both_end, _inward(receive, protocol, stream, count), tg.cancel_scope)
        with contextlib.suppress(OSError):  # the client went away while a message was sent
            await _outward(send, protocol, stream, count)
        tg.cancel_scope.cancel()


async def _both_end(side: Awaitable[None], scope: anyio.CancelScope) -> None:
    try:
        await side
    finally:
        scope.cancel()


async def _flush(
    protocol: ClientProtocol, stream: InsideStream, count: Callable[[int], None]
) -> None:
    for data in protocol.data_to_send():
        if data:
            count(len(data))
            await stream.send(data)
        else:
            await stream.send_eof()


async def _inward(
    receive: Receive,
    protocol: ClientProtocol,
    stream: InsideStream,
    count: Callable[[int], None],
) -> None:
    """The client's messages to the sandbox's server."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            if protocol.state is State.OPEN:
                code = message.get("code", _GOING_AWAY)
                protocol.send_close(code if code != _NO_STATUS else None)
                await _flush(protocol, stream, count)
            return
        if message.get("text") is not None:
            protocol.send_text(message["text"].encode())
        elif message.get("bytes") is not None:
            protocol.send_binary(message["bytes"])
        await _flush(protocol, stream, count)


async def _outward(
    send: Send,
    protocol: ClientProtocol,
    stream: InsideStream,
    count: Callable[[int], None],
) -> None:
    """The server's messages to the client, reassembled from its frames."""
    parts: list[bytes] = []
    text = False
    while True:
        try:
            data = await stream.receive(_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            protocol.receive_eof()
            data = b""
        else:
            count(len(data))
            protocol.receive_data(data)
        for frame in protocol.events_received():
            if not isinstance(frame, Frame):
                continue
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                text = frame.opcode is Opcode.TEXT
                parts = [bytes(frame.data)]
            elif frame.opcode is Opcode.CONT:
                parts.append(bytes(frame.data))
            elif frame.opcode is Opcode.CLOSE:
                close = Close.parse(frame.data) if frame.data else None
                code = close.code if close is not None else 1000
                await _flush(protocol, stream, count)
                await send({"type": "websocket.close", "code": code})
                return
            else:
                continue  # ping (answered by the protocol) or pong
            if frame.fin:
                whole = b"".join(parts)
                parts = []
                if text:
                    await send({"type": "websocket.send", "text": whole.decode(errors="replace")})
                else:
                    await send({"type": "websocket.send", "bytes": whole})
        await _flush(protocol, stream, count)
        if not data:
            await send({"type": "websocket.close", "code": _GOING_AWAY})
            return
