"""Ports into a sandbox: E2B's ``get_host(port)``, HTTP and WebSocket proxied to a server the
code started there.

A request names its sandbox and port by ``<port>-<id>.<domain>`` in its Host, or by the
``E2b-Sandbox-Id`` and ``E2b-Sandbox-Port`` headers (the gateway routes both here for every
port but envd's and the interpreter's). It reaches the port on the sandbox's own loopback
through a socket made inside the sandbox's network namespace (``corral.network``'s
``connect_inside``): no link, no host port, nothing the sandbox can name outside itself.

A sandbox created with ``network.allow_public_traffic`` takes any request; any other needs its
traffic access token (``trafficAccessToken`` at create) in ``e2b-traffic-access-token``. The
token and envd's are taken off the request before it goes in: no secret reaches the sandbox.
A sandbox has at most ``max_connections`` proxied requests and WebSockets open at once (more
answer 429) and moves at most ``max_bytes`` through them both ways in its life (past it they
are cut and new ones refused). What the server in the sandbox sends is only relayed, never
believed: its response is parsed by h11 (a malformed one is a 502), WebSocket frames by
``websockets``' protocol, each message at most ``MAX_MESSAGE``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.abc
import h11
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from corral.e2b._keys import same_secret
from corral.e2b._port_access import PortAccess
from corral.e2b._sandboxes import Sandbox
from corral.e2b._websocket import proxy_websocket, refuse_websocket
from corral.errors import CorralError
from corral.network import InsideStream, PortClosed

__all__ = ["TOKEN_HEADER", "Ports", "port_fields", "refuse", "sandbox_domain"]

TOKEN_HEADER = b"e2b-traffic-access-token"
_CHUNK = 64 * 1024  # bytes per read from the sandbox's server
_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
    b"trailer", b"upgrade", b"proxy-connection",
})  # fmt: skip
_SECRETS = frozenset({TOKEN_HEADER, b"x-access-token", b"x-api-key"})
_PORT_CLOSED = "The sandbox is running but port is not open"


def json_response(body: dict[str, object], status: int) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def error_response(status: int, message: str) -> Response:
    """E2B's error shape, as ``_service`` answers it (that module holds this one's state)."""
    return json_response({"code": status, "message": message}, status)


Counter = Callable[[int], None]
"""Counts bytes moved against the sandbox's budget; raises BudgetSpent past it."""


class BudgetSpent(Exception):
    """The sandbox moved its ``max_bytes`` through its ports."""


@dataclass(slots=True)
class Ports:
    """Every sandbox's port access, and the bounds they share."""

    max_connections: int
    max_bytes: int

    def count(self, access: PortAccess, moved: int) -> None:
        access.moved += moved
        if access.moved > self.max_bytes:
            raise BudgetSpent(f"the sandbox moved its {self.max_bytes} bytes through its ports")

    async def serve(
        self, sandbox: Sandbox, port: int, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Proxy one HTTP request or WebSocket into ``port`` of ``sandbox``."""
        access = sandbox.ports
        refusal = self._refusal(access, scope)
        if refusal is not None:
            await refuse(scope, receive, send, *refusal)
            return
        access.connections += 1
        try:
            try:
                sock = await sandbox.session.connect_port(port)
            except PortClosed:
                closed = json_response(
                    {"code": 502, "message": _PORT_CLOSED, "sandboxId": sandbox.id, "port": port},
                    502,
                )
                await refuse(scope, receive, send, 502, "", closed)
                return
            except CorralError as exc:
                await refuse(scope, receive, send, 502, f"The sandbox {sandbox.id}: {exc}")
                return
            stream = InsideStream(sock)

            def counter(moved: int) -> None:
                self.count(access, moved)

            async with stream:
                if scope["type"] == "websocket":
                    await proxy_websocket(
                        scope, receive, send, stream, counter, forwarded_headers(scope)
                    )
                else:
                    await _proxy_http(scope, receive, send, stream, counter)
        finally:
            access.connections -= 1

    def _refusal(self, access: PortAccess, scope: Scope) -> tuple[int, str] | None:
        if not access.public:
            token = _header(scope, TOKEN_HEADER)
            if not same_secret(token, access.token):
                return 403, (
                    "This sandbox's ports need its traffic access token in the "
                    "e2b-traffic-access-token header (or create it with "
                    "network={'allow_public_traffic': True})"
                )
        if access.connections >= self.max_connections:
            return 429, f"the sandbox already has {self.max_connections} connections in"
        if access.moved >= self.max_bytes:
            return 429, f"the sandbox moved its {self.max_bytes} bytes through its ports"
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def forwarded_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The client's headers as the sandbox's server may see them: no hop-by-hop, no secret."""
    return [(k, v) for k, v in scope["headers"] if k not in _HOP_BY_HOP and k not in _SECRETS]


async def refuse(
    scope: Scope, receive: Receive, send: Send, status: int, message: str,
    response: Response | None = None,
) -> None:  # fmt: skip
    """E2B's error (or ``response``) for a request or a WebSocket not let in."""
    answer = response if response is not None else error_response(status, message)
    if scope["type"] == "websocket":
        await refuse_websocket(scope, send, answer)
        return
    await answer(scope, receive, send)


async def _proxy_http(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: InsideStream,
    count: Counter,
) -> None:
    conn = h11.Connection(h11.CLIENT)
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    headers = [*forwarded_headers(scope), (b"connection", b"close")]
    if _header(scope, b"host") is None:
        headers.append((b"host", b"localhost"))
    try:
        await _send(
            stream,
            conn.send(h11.Request(method=scope["method"], target=target, headers=headers)),
            count,
        )
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            if body:
                await _send(stream, conn.send(h11.Data(data=body)), count)
            if not message.get("more_body", False):
                break
        await _send(stream, conn.send(h11.EndOfMessage()), count)
    except (h11.LocalProtocolError, anyio.BrokenResourceError, OSError):
        await error_response(502, "the sandbox's server closed the connection")(
            scope, receive, send
        )
        return
    except BudgetSpent as exc:
        await error_response(429, str(exc))(scope, receive, send)
        return
    await _relay_response(scope, receive, send, stream, conn, count)


async def _send(stream: InsideStream, data: bytes | None, count: Counter) -> None:
    if data:
        count(len(data))
        await stream.send(data)


async def _hang_up_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


class _Relay:
    """The sandbox server's response, relayed to the client as h11 parses it."""

    def __init__(self, send: Send, stream: InsideStream, conn: h11.Connection, count: Counter):
        self._send = send
        self._stream = stream
        self._conn = conn
        self._count = count
        self.started = False
        self._pending = b""  # the last body chunk, held until it is known to end the body or not

    async def run(self) -> None:
        """Relay the response to its end (or the connection's)."""
        while True:
            event = self._conn.next_event()
            if event is h11.NEED_DATA:
                await self._flush(more=True)
                try:
                    data = await self._stream.receive(_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = b""
                self._count(len(data))
                self._conn.receive_data(data)
            elif isinstance(event, h11.Response):
                kept = [(k, v) for k, v in event.headers
                        if k not in _HOP_BY_HOP and k != b"transfer-encoding"]  # fmt: skip
                start = {"type": "http.response.start", "status": event.status_code,
                         "headers": kept}  # fmt: skip
                await self._send(start)
                self.started = True
            elif isinstance(event, h11.Data):
                await self._flush(more=True)
                self._pending = bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                await self._flush(more=False)
                return

    async def _flush(self, *, more: bool) -> None:
        if self._pending or not more:
            body = {"type": "http.response.body", "body": self._pending, "more_body": more}
            await self._send(body)
            self._pending = b""


async def _relay_response(
    scope: Scope,
    receive: Receive,
    send: Send,
    stream: InsideStream,
    conn: h11.Connection,
    count: Counter,
) -> None:
    relay = _Relay(send, stream, conn, count)
    # The server may take its time, or stream for ever: it stops when the client leaves.
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hang_up_on_disconnect, receive, tg.cancel_scope)
        try:
            await relay.run()
        except (h11.RemoteProtocolError, BudgetSpent) as exc:
            # Begun, the response is cut where it went wrong (uvicorn closes the connection).
            if not relay.started:
                status, message = (
                    (502, "the sandbox's server sent no valid HTTP response")
                    if isinstance(exc, h11.RemoteProtocolError)
                    else (429, "the sandbox moved its bytes through its ports")
                )
                await error_response(status, message)(scope, receive, send)
        tg.cancel_scope.cancel()


_HOST_TEXT = re.compile(
    r"[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?"
)


def sandbox_domain(configured: str, host: str | None) -> str | None:
    """The domain ``get_host`` names: the configured one, else the Host the request came to
    (None when it is no host name: the SDK then keeps its own ``E2B_DOMAIN``)."""
    if configured:
        return configured
    if host is None or _HOST_TEXT.fullmatch(host) is None:
        return None
    return host.lower()


def port_fields(access: PortAccess, domain: str | None) -> dict[str, str]:
    """What create and connect answer of a sandbox's ports: its domain, and its traffic
    access token unless it is public."""
    fields = {} if domain is None else {"domain": domain}
    if not access.public:
        fields["trafficAccessToken"] = access.token
    return fields
