"""Connect RPC over its JSON codec, as envd speaks it to the E2B SDK.

Unary calls: ``application/json`` body and answer; errors are ``{code, message}`` with the
HTTP status Connect maps the code to. Server streams: the request and every answer message
are enveloped (1 flag byte, 4-byte big-endian length, JSON); the last envelope has flag
``0x02`` and carries ``{}`` or ``{"error": {...}}``. No compression is offered or accepted.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from corral._digits import ascii_int

__all__ = [
    "ConnectError",
    "ConnectStream",
    "Emit",
    "deadline_of",
    "read_message",
    "read_stream",
    "stream_answer",
    "unary",
]

_MAX_MESSAGE = 1024 * 1024  # bytes; envd's requests are small JSON
_END_STREAM = 0x02
_TIMEOUT_DIGITS = 10  # Connect bounds Connect-Timeout-Ms to 10 digits
_HEADER = struct.Struct(">BI")

# Connect code -> HTTP status (connectrpc.com/docs/protocol#error-codes).
_STATUS = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "unauthenticated": 401,
}


class ConnectError(Exception):
    """An RPC's failure, with its Connect code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}

    def response(self) -> Response:
        return Response(
            json.dumps(self.as_json()),
            status_code=_STATUS.get(self.code, 500),
            media_type="application/json",
        )


async def read_message(request: Request) -> dict[str, Any]:
    """The request message, enveloped or not.

    Raises:
        ConnectError: too large, not JSON, not an object, or compressed.
    """
    if request.headers.get("content-encoding", "identity") != "identity":
        raise ConnectError("unimplemented", "compressed requests are not supported")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > _MAX_MESSAGE + _HEADER.size:
            raise ConnectError("resource_exhausted", "the request message is too large")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media.startswith("application/connect+"):
        if len(body) < _HEADER.size:
            raise ConnectError("invalid_argument", "the request envelope is incomplete")
        flags, size = _HEADER.unpack_from(body)
        if flags & 0x01:
            raise ConnectError("unimplemented", "compressed messages are not supported")
        body = body[_HEADER.size : _HEADER.size + size]
    return _object(body)


async def read_stream(request: Request) -> AsyncIterator[dict[str, Any]]:
    """The messages of a client stream as they arrive, each enveloped; at most one message
    and one received chunk are held at a time.

    Raises:
        ConnectError: a message too large, compressed, not a JSON object, or cut short.
    """
    if request.headers.get("content-encoding", "identity") != "identity":
        raise ConnectError("unimplemented", "compressed requests are not supported")
    buffer = bytearray()
    async for chunk in request.stream():
        buffer.extend(chunk)
        while len(buffer) >= _HEADER.size:
            flags, size = _HEADER.unpack_from(buffer)
            if size > _MAX_MESSAGE:
                raise ConnectError("resource_exhausted", "a request message is too large")
            if flags & 0x01:
                raise ConnectError("unimplemented", "compressed messages are not supported")
            if len(buffer) < _HEADER.size + size:
                break
            payload = bytes(buffer[_HEADER.size : _HEADER.size + size])
            del buffer[: _HEADER.size + size]
            yield _object(payload)
    if buffer:
        raise ConnectError("invalid_argument", "the request stream ends in a partial message")


def _object(payload: bytes | bytearray) -> dict[str, Any]:
    try:
        message = json.loads(payload or b"{}")
    except ValueError:
        raise ConnectError("invalid_argument", "a request message is not JSON") from None
    if not isinstance(message, dict):
        raise ConnectError("invalid_argument", "a request message is not an object")
    return message


def stream_answer(message: Mapping[str, Any] | None, error: ConnectError | None = None) -> Response:
    """The answer of a client stream: its one message and the end of the stream, or the
    end carrying ``error``."""
    if error is not None:
        body = envelope({"error": error.as_json()}, end=True)
    else:
        body = envelope(message or {}) + envelope({}, end=True)
    return Response(body, media_type="application/connect+json")


def unary(message: Mapping[str, Any]) -> Response:
    return Response(json.dumps(message), media_type="application/json")


def envelope(message: Mapping[str, Any], *, end: bool = False) -> bytes:
    data = json.dumps(message).encode()
    return _HEADER.pack(_END_STREAM if end else 0, len(data)) + data


Emit = Callable[[Mapping[str, Any]], Awaitable[None]]
"""Sends one message of a server stream."""


class ConnectStream(Response):
    """A server stream: ``produce(emit)`` sends the messages, then the end-of-stream envelope.

    ``produce`` is cancelled when the client goes away or the deadline passes (then the
    stream ends with ``deadline_exceeded``); a ConnectError it raises ends the stream with
    that error.
    """

    media_type = "application/connect+json"

    def __init__(self, produce: Callable[[Emit], Awaitable[None]], deadline: float | None) -> None:
        super().__init__(media_type=self.media_type)
        self._produce = produce
        self._deadline = deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", self.media_type.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        gone = False

        async def emit(message: Mapping[str, Any]) -> None:
            await send({"type": "http.response.body", "body": envelope(message), "more_body": True})

        async def watch_disconnect(group: anyio.CancelScope) -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            group.cancel()

        end: dict[str, Any] = {}
        with anyio.move_on_after(math.inf if self._deadline is None else self._deadline) as timer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect, tg.cancel_scope)
                try:
                    await self._produce(emit)
                except ConnectError as exc:
                    end = {"error": exc.as_json()}
                tg.cancel_scope.cancel()
        if timer.cancelled_caught:
            end = {"error": {"code": "deadline_exceeded", "message": "the deadline passed"}}
        if not gone:
            await send({"type": "http.response.body", "body": envelope(end, end=True)})


def deadline_of(request: Request) -> float | None:
    """Seconds from ``Connect-Timeout-Ms``, or None without one.

    Raises:
        ConnectError: ``invalid_argument``, the header is not 1 to 10 ASCII digits (as Connect
            defines it).
    """
    text = request.headers.get("connect-timeout-ms")
    if text is None:
        return None
    value = ascii_int(text, max_digits=_TIMEOUT_DIGITS)
    if value is None:
        raise ConnectError(
            "invalid_argument", f"Connect-Timeout-Ms must be 1 to {_TIMEOUT_DIGITS} ASCII digits"
        )
    return value / 1000.0
