"""The egress side: every connection a networked sandbox makes, judged, then dialled or refused.

A connection arrives at the sandbox's own listener (``_link``) with its original
destination. It is let out when

* its address is one corral's resolver handed the sandbox for a name its policy allows, and
  the name its first bytes ask for (TLS SNI, HTTP Host), if they ask for one, is allowed
  too: then the name is dialled, as corral resolves it now (an allowed address serving
  another name is no way around the policy);
* or its address itself is allowed (an IP or CIDR entry);

and the address dialled may be reached at all (``NetworkCeiling.reachable``: no loopback,
link-local, private or host address unless ``private_allow`` names it). Anything else is
reset at once and counted, with the reason logged. Hosts with header rules go through the
interceptor (``_intercept``), which adds their headers to each request.

A sandbox holds at most ``max_connections`` at once and moves at most ``max_bytes``; past it
its connections are cut. The engine's descriptors and memory are bounded with it: two
sockets and two 64 KiB buffers per connection.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import ssl
import struct
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio
import anyio.abc

from corral.network._dns import MAX_QUERY, addresses_of, answer
from corral.network._intercept import CertificateAuthority, intercept
from corral.network._link import DNS_PORT, LinkSockets, original_destination
from corral.network._policy import Address, NetworkCeiling, SandboxNetwork, canonical
from corral.network._relay import Prefixed, Switched, relay_http
from corral.network._sniff import MAX_HELLO, sniff

__all__ = ["Egress", "EgressLink", "EgressStatistics"]

logger = logging.getLogger("corral.network")

_CHUNK = 64 * 1024  # bytes per read of a spliced connection
_PEEK_SECONDS = 0.5  # the wait for a client's first bytes (a server-first protocol sends none)
_CONNECT_SECONDS = 10.0  # to dial upstream
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends a reset
_MAX_REMEMBERED = 4096  # addresses one sandbox's resolver answers are remembered for

Resolver = Callable[[str], Awaitable[Sequence[Address]]]


@dataclass(frozen=True, slots=True)
class EgressStatistics:
    """Counters for ``/metrics``."""

    allowed: int
    denied: int
    bytes: int
    bytes_by_tenant: dict[str, int]
    links: int


async def _system_resolve(name: str) -> Sequence[Address]:
    try:
        infos = await anyio.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return ()
    return addresses_of(infos)


async def _reset(stream: anyio.abc.SocketStream) -> None:
    """Close with a reset: the sandbox's connect or first read fails at once."""
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)  # noqa: S610 - anyio, not Django
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    await stream.aclose()


def _own_addresses() -> frozenset[Address]:
    """The host's own addresses (every interface's), never dialled for a sandbox."""
    found: set[Address] = set()
    with contextlib.suppress(OSError, ImportError):
        from pyroute2 import IPRoute

        with IPRoute() as route:
            for entry in route.get_addr():
                value = entry.get_attr("IFA_ADDRESS")
                with contextlib.suppress(ValueError, TypeError):
                    found.add(canonical(ipaddress.ip_address(value)))
    return frozenset(found)


class Egress:
    """The server's egress side: the ceiling, its resolver, its counters, every link."""

    def __init__(
        self,
        ceiling: NetworkCeiling,
        *,
        resolve: Resolver = _system_resolve,
        ca: CertificateAuthority | None = None,
    ) -> None:
        self.ceiling = ceiling
        self._resolve_upstream = resolve
        self.ca = ca
        """corral's egress CA, which sandboxes trust: needed to add headers to HTTPS."""
        self._own: frozenset[Address] | None = None
        self.allowed = 0
        self.denied = 0
        self.bytes = 0
        self.bytes_by_tenant: Counter[str] = Counter()
        self._links: set[EgressLink] = set()

    def own_addresses(self) -> frozenset[Address]:
        """The host's addresses, as ``attach`` found them (none before it ran once)."""
        return self._own or frozenset()

    async def resolve(self, name: str) -> list[Address]:
        """A name's addresses that may be dialled: ``[network] hosts`` first, else the
        host's resolver's; none when every one is unreachable."""
        static = self.ceiling.hosts.get(name)
        found = list(static) if static is not None else list(await self._resolve_upstream(name))
        own = self.own_addresses()
        return [a for a in found if self.ceiling.reachable(a, own)]

    def reachable(self, address: Address) -> bool:
        return self.ceiling.reachable(address, self.own_addresses())

    async def attach(
        self,
        sockets: LinkSockets,
        policy: SandboxNetwork,
        *,
        tenant: str,
        sandbox: str,
        task_group: anyio.abc.TaskGroup,
    ) -> EgressLink:
        """Serve a sandbox's link (its sockets become the link's, closed with it)."""
        if self._own is None:  # netlink's sync API cannot run in the event loop's thread
            self._own = await anyio.to_thread.run_sync(_own_addresses)
        link = EgressLink(self, sockets, policy, tenant=tenant, sandbox=sandbox)
        self._links.add(link)
        await task_group.start(link.serve)
        return link

    def forget(self, link: EgressLink) -> None:
        self._links.discard(link)

    def statistics(self) -> EgressStatistics:
        return EgressStatistics(
            allowed=self.allowed,
            denied=self.denied,
            bytes=self.bytes,
            bytes_by_tenant=dict(self.bytes_by_tenant),
            links=len(self._links),
        )


class EgressLink:
    """One sandbox's way out: its policy (changed live by ``update``), its bounds."""

    def __init__(
        self,
        egress: Egress,
        sockets: LinkSockets,
        policy: SandboxNetwork,
        *,
        tenant: str,
        sandbox: str,
    ) -> None:
        self._egress = egress
        self._sockets = sockets
        self.policy = policy
        self.tenant = tenant
        self.sandbox = sandbox
        self._names: dict[Address, set[str]] = {}
        """Addresses the resolver handed this sandbox, and for which names."""
        self._open = 0
        self._live: dict[anyio.CancelScope, tuple[str, Address]] = {}
        """Each spliced connection's scope, with the name (or address) it was let out for."""
        self.moved = 0
        self._scope = anyio.CancelScope()
        self._serving = False
        self.closed = False

    def update(self, policy: SandboxNetwork) -> None:
        """Replace the policy at once: new connections are judged by it, the names the
        resolver handed out before are forgotten, and open connections it would refuse now
        are cut."""
        self.policy = policy
        self._names.clear()
        for scope, (name, target) in list(self._live.items()):
            still = policy.allows_name(name) if name else policy.allows_address(target)
            if not still:
                scope.cancel()

    def close(self) -> None:
        """Cut every connection; the sockets close as ``serve`` unwinds (the sandbox's
        namespace may then go)."""
        if self.closed:
            return
        self.closed = True
        self._scope.cancel()
        if not self._serving:
            self._sockets.close()
        self._egress.forget(self)

    # serving ---------------------------------------------------------------------------

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # The wrappers close their sockets: a socket closed under a live asyncio transport
        # leaves its descriptor's number registered with the event loop.
        self._serving = True
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    for sock in self._sockets.tcp:
                        listener = await anyio.abc.SocketListener.from_socket(sock)
                        tg.start_soon(self._accept, listener, tg)
                    for sock in self._sockets.dns:
                        udp = await anyio.abc.UDPSocket.from_socket(sock)
                        tg.start_soon(self._dns, udp)
                    task_status.started()
        finally:
            self._sockets.close()

    async def _accept(self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup) -> None:
        async with listener:
            await self._accept_each(listener, tg)

    async def _accept_each(
        self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup
    ) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError:  # EMFILE and the like: the sandbox waits; the server goes on
                await anyio.sleep(0.05)
                continue
            tg.start_soon(self._connection, stream)

    async def _dns(self, udp: anyio.abc.UDPSocket) -> None:
        async with udp:
            await self._answer_each(udp)

    async def _answer_each(self, udp: anyio.abc.UDPSocket) -> None:
        while True:
            try:
                packet, peer = await udp.receive()
            except OSError:
                continue
            if len(packet) > MAX_QUERY:
                continue
            try:
                reply = await answer(packet, self._resolve_for_sandbox)
            except Exception:  # one bad query must not end the sandbox's resolver
                logger.exception("corral's resolver failed a query of sandbox %s", self.sandbox)
                continue
            if reply is not None:
                with contextlib.suppress(OSError):
                    await udp.sendto(reply, *peer[:2])

    async def _resolve_for_sandbox(self, name: str) -> list[Address]:
        if not self.policy.allows_name(name):
            self._refused(f"DNS for {name!r}: not allowed")
            return []
        found = await self._egress.resolve(name)
        if len(self._names) < _MAX_REMEMBERED:
            for address in found:
                self._names.setdefault(address, set()).add(name)
        return found

    def _refused(self, reason: str) -> None:
        self._egress.denied += 1
        logger.info("egress refused for sandbox %s: %s", self.sandbox, reason)

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)  # noqa: S610 - anyio's
        try:
            host, port = original_destination(raw)
            destination = canonical(ipaddress.ip_address(host.split("%")[0]))
        except (OSError, ValueError):
            await _reset(stream)
            return
        if self._open >= self._egress.ceiling.max_connections:
            self._refused(f"{destination}:{port}: {self._open} connections open already")
            await _reset(stream)
            return
        self._open += 1
        try:
            await self._judge_and_dial(stream, destination, port)
        finally:
            self._open -= 1

    async def _judge_and_dial(
        self, stream: anyio.abc.SocketStream, destination: Address, port: int
    ) -> None:
        names = self._names.get(destination, set())
        first = b""
        target: Address | None = None
        name = ""
        if port == DNS_PORT and not names:
            self._refused(f"DNS over TCP to {destination}: corral answers DNS over UDP only")
            await _reset(stream)
            return
        if any(self.policy.allows_name(n) for n in names):
            first = await self._peek(stream)
            peek = sniff(first)
            if peek.kind and (peek.truncated or not peek.complete):
                # A name that never arrives whole (a ClientHello past MAX_HELLO, a head sent
                # slower than the peek waits) would let the address's verdict stand for it.
                self._refused(f"{destination}:{port}: its first bytes name no host in time")
                await _reset(stream)
                return
            asked = peek.name
            if asked and asked not in names:
                if not self.policy.allows_name(asked):
                    self._refused(f"{destination}:{port} for {asked!r}: not allowed")
                    await _reset(stream)
                    return
                resolved = await self._egress.resolve(asked)
                target, name = (resolved[0] if resolved else None), asked
            else:
                allowed = sorted(n for n in names if self.policy.allows_name(n))
                target, name = destination, asked or allowed[0]
        elif self.policy.allows_address(destination):
            target = destination
        if target is None or not self._egress.reachable(target):
            what = f"{destination}:{port}" + (f" for {name!r}" if name else "")
            self._refused(f"{what}: not allowed" if target is None else f"{what}: not reachable")
            await _reset(stream)
            return
        with anyio.CancelScope() as scope:
            self._live[scope] = (name, target)
            try:
                await self._dial(stream, target, port, first, name)
            finally:
                del self._live[scope]

    async def _peek(self, stream: anyio.abc.SocketStream) -> bytes:
        data = b""
        with anyio.move_on_after(_PEEK_SECONDS):
            while True:
                try:
                    chunk = await stream.receive(MAX_HELLO - len(data))
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    break
                data += chunk
                if sniff(data).complete or len(data) >= MAX_HELLO:
                    break
        return data

    async def _dial(
        self,
        stream: anyio.abc.SocketStream,
        target: Address,
        port: int,
        first: bytes,
        name: str,
    ) -> None:
        try:
            with anyio.fail_after(_CONNECT_SECONDS):
                upstream = await anyio.connect_tcp(str(target), port)
        except (OSError, TimeoutError) as exc:
            self._refused(f"{target}:{port}: cannot connect ({exc})")
            await _reset(stream)
            return
        self._egress.allowed += 1
        headers = self.policy.inject.get(name, {}) if name else {}
        kind = sniff(first).kind
        async with upstream, stream:
            inner: anyio.abc.ByteStream = stream
            outer: anyio.abc.ByteStream = upstream
            if name and (headers or kind == "http"):  # every request must ask for ``name``
                relayed = await self._relay(stream, upstream, first, name, kind, headers)
                if relayed is None:
                    return
                inner, outer, switched = relayed
                first, back = switched.to_upstream, switched.to_sandbox
                if back and self._count(len(back)):
                    await inner.send(back)
            if first:
                await outer.send(first)
                self._count(len(first))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, inner, outer, tg)
                tg.start_soon(self._pump, outer, inner, tg)

    async def _relay(
        self,
        stream: anyio.abc.SocketStream,
        upstream: anyio.abc.SocketStream,
        first: bytes,
        name: str,
        kind: str,
        headers: Mapping[str, str],
    ) -> tuple[anyio.abc.ByteStream, anyio.abc.ByteStream, Switched] | None:
        """HTTP a request at a time (TLS terminated first for a host with headers); the
        streams and what follows when the host switches protocols, else None (done)."""
        tls = kind == "tls"
        ca = self._egress.ca
        if tls and ca is None:
            self._refused(f"{name!r}: its requests carry headers, and this server has no CA")
            return None
        try:
            if tls:
                assert ca is not None
                inner, outer, switched = await intercept(
                    stream, first, upstream, name=name, ca=ca,
                    upstream_ca=self._egress.ceiling.upstream_ca, headers=headers,
                    count=self._count,
                )  # fmt: skip
            else:
                inner, outer = Prefixed(first, stream), upstream
                switched = await relay_http(
                    inner, outer, name=name, headers=headers, count=self._count
                )
        except (ssl.SSLError, OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            logger.info("egress for sandbox %s to %r ended: %s", self.sandbox, name, exc)
            return None
        return None if switched is None else (inner, outer, switched)

    async def _pump(
        self,
        source: anyio.abc.ByteStream,
        sink: anyio.abc.ByteStream,
        tg: anyio.abc.TaskGroup,
    ) -> None:
        try:
            while True:
                data = await source.receive(_CHUNK)
                if not self._count(len(data)):
                    logger.info("egress cut for sandbox %s: past max_bytes", self.sandbox)
                    tg.cancel_scope.cancel()
                    return
                await sink.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await sink.send_eof()

    def _count(self, size: int) -> bool:
        """Add ``size`` bytes to the sandbox's and the server's counts; False past the bound."""
        self.moved += size
        self._egress.bytes += size
        self._egress.bytes_by_tenant[self.tenant] += size
        return self.moved <= self._egress.ceiling.max_bytes
