"""Slow and greedy clients: a request-head deadline and a bound on connections per address.

uvicorn (0.54, the version corral runs on) has neither. Its ``timeout_keep_alive`` is armed
only once a response is complete and is cancelled by any byte that arrives, so a connection
that never finishes its first head, or sends one byte of its next, is held for ever; its
``limit_concurrency`` counts connections server-wide, answers 503 only once a head is complete
(never to a connection still sending one) and cannot tell one client from another. 20,000
half-sent heads therefore take the server to its descriptor limit. Putting a proxy in front is
the usual cure, but corral must hold on its own (embedded defaults, a trainer's private
network), and another server would lose uvicorn's graceful shutdown the engine relies on.

So this is a thin guard over uvicorn's own h11 protocol, installed with its ``http=`` option:

* a connection has ``header_timeout`` seconds, from its opening, to send its whole first
  request head, and as long again from the first byte of each later one (between requests,
  uvicorn's keep-alive timeout still applies); past it the connection is closed;
* a client address holds at most ``max_per_client`` connections at once; one more is answered
  429 and closed at once, before any byte is read, so a flood from one address costs one
  descriptor per connection only for as long as it takes to say no. Trusted proxies are not
  counted: every client behind one shares its address.

The count is of the TCP peer, never of a header. The subclass uses uvicorn's ``conn`` (the
h11 connection), ``client``, ``transport`` and ``on_response_complete``: a uvicorn that changes
them fails this module's tests, not silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import h11
from uvicorn.config import Config as UvicornConfig
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

__all__ = ["ConnectionGuard", "GuardedProtocol", "guarded_protocol", "networks_of"]

logger = logging.getLogger("corral.http")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_REFUSAL_TEXT = b"Too many connections from this address"
_REFUSAL = (
    b"HTTP/1.1 429 Too Many Requests\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: " + str(len(_REFUSAL_TEXT)).encode() + b"\r\n"
    b"retry-after: 1\r\n"
    b"connection: close\r\n\r\n" + _REFUSAL_TEXT
)


def networks_of(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """The networks of ``cidrs``, each IPv4 one also as its IPv4-mapped IPv6 form, which a
    dual-stack listener reports for IPv4 peers (``::ffff:10.0.0.1``)."""
    found: list[Network] = []
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr, strict=False)
        found.append(network)
        if isinstance(network, ipaddress.IPv4Network):
            mapped = f"::ffff:{network.network_address}/{96 + network.prefixlen}"
            found.append(ipaddress.ip_network(mapped))
    return tuple(found)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class ConnectionGuard:
    """What every connection of one server shares: its limits and the open count per address."""

    def __init__(
        self, *, header_timeout: float, max_per_client: int, trusted: Sequence[str] = ()
    ) -> None:
        self.header_timeout = header_timeout
        self.max_per_client = max_per_client
        self._trusted = networks_of(trusted)
        self._open: dict[str, int] = {}
        self._refusing: set[str] = set()  # addresses at the bound, said once until they drop

    def key_of(self, host: str) -> str | None:
        """The address ``host`` is counted under, or None when it is not counted (a trusted
        proxy, or not an IP address at all: a Unix socket)."""
        address = _address(host)
        if address is None or any(address in network for network in self._trusted):
            return None
        return str(address)

    def admit(self, key: str) -> bool:
        """Count one more connection from ``key``; False (and nothing counted) past the bound."""
        held = self._open.get(key, 0)
        if held >= self.max_per_client:
            if key not in self._refusing:
                self._refusing.add(key)
                logger.warning(
                    "refusing connections from %s: it holds %d already "
                    "([server] max_connections_per_client)",
                    key,
                    held,
                )
            return False
        self._open[key] = held + 1
        return True

    def release(self, key: str) -> None:
        held = self._open.get(key, 0) - 1
        if held > 0:
            self._open[key] = held
        else:
            self._open.pop(key, None)
            self._refusing.discard(key)


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol under a :class:`ConnectionGuard` (set by :func:`guarded_protocol`)."""

    guard: ClassVar[ConnectionGuard]

    def __init__(
        self,
        config: UvicornConfig,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._counted: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        key = None if self.client is None else self.guard.key_of(self.client[0])
        if key is not None:
            if not self.guard.admit(key):
                transport.write(_REFUSAL)
                transport.close()
                return
            self._counted = key
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        if self._counted is not None:
            self.guard.release(self._counted)
            self._counted = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined next request may already be here, whole or in part.
        if self.conn.trailing_data[0]:
            self._watch_head()

    def _watch_head(self) -> None:
        """Between a head's first byte and its end, the deadline runs; otherwise it does not."""
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if self._head_timer is None:
                self._arm_head_timer()
        else:
            self._disarm_head_timer()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.guard.header_timeout, self._head_too_slow)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        with contextlib.suppress(h11.LocalProtocolError):
            self.conn.send(h11.ConnectionClosed())
        self.transport.close()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` whose connections share ``guard``
    (uvicorn builds protocols from a class and its own arguments only)."""

    class Guarded(GuardedProtocol):
        pass

    Guarded.guard = guard
    return Guarded
