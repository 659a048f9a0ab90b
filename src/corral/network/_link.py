"""A sandbox's way out, made inside its own network namespace: no interface, no route out.

A sandbox's network namespace has only its loopback. For a sandbox whose policy allows
something, the engine (root) enters that namespace from a thread of its own, through the
sandbox's pidfd, and there

1. brings ``lo`` up and routes every address to it (``prefsrc 127.0.0.1``; without a route
   a connect fails before netfilter sees it, without the source it leaves from 0.0.0.0);
2. opens corral's listeners in it: TCP ``127.0.0.1:1`` and ``[::1]:1``, DNS on UDP
   ``127.0.0.1:53`` and ``[::1]:53`` (ports below 1024, which the sandbox's uid cannot take);
3. loads a small nftables table in it: every TCP connection not to loopback is redirected to
   the TCP listener, every UDP datagram to port 53 to the DNS one, and everything else not to
   loopback is dropped, so a UDP send answers ``EPERM`` at once.

The sockets are the engine's; the sandbox never holds them. Nothing is made on the host: no
veth, no namespace, no rule. The namespace, its routes and its table go with the sandbox,
once the engine has closed its sockets. The sandbox cannot change any of it (no capability,
and the seccomp policy refuses netlink sockets), and even if it could, it would find no
interface but its loopback: it could only cut its own way out.

The thread is a fresh one each time, never a pool's: ``setns`` changes the namespace of the
calling thread for the rest of its life.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from corral.errors import IsolationError

__all__ = [
    "DNS_PORT",
    "TCP_PORT",
    "LinkSockets",
    "nftables_available",
    "open_link",
    "original_destination",
]

TCP_PORT = 1
DNS_PORT = 53
_BACKLOG = 1024
_CLONE_NEWNET = 0x40000000
_SO_ORIGINAL_DST = 80  # SOL_IP's SO_ORIGINAL_DST, and SOL_IPV6's IP6T_SO_ORIGINAL_DST
_TIME_WAIT_SECONDS = 5  # the namespace's conntrack keeps a closed connection this long
_TIME_WAIT = "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_time_wait"

RULESET = f"""
table inet corral {{
    chain steer {{
        type nat hook output priority -100; policy accept;
        ip daddr 127.0.0.0/8 return
        ip6 daddr ::1 return
        meta l4proto tcp redirect to :{TCP_PORT}
        udp dport 53 redirect to :{DNS_PORT}
    }}
    chain guard {{
        type filter hook output priority filter; policy drop;
        ip daddr 127.0.0.0/8 accept
        ip6 daddr ::1 accept
    }}
}}
"""

T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(slots=True)
class LinkSockets:
    """The engine's sockets inside one sandbox's namespace."""

    tcp: list[socket.socket] = field(default_factory=list)
    dns: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        for sock in (*self.tcp, *self.dns):
            sock.close()


class _Nftables:
    """libnftables (Debian's libnftables1), through ctypes: a ruleset is one call, no fork."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("nftables") or "libnftables.so.1"
        lib = ctypes.CDLL(name, use_errno=True)
        lib.nft_ctx_new.restype = ctypes.c_void_p
        lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
        lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
        self._lib = lib

    def run(self, text: str) -> None:
        """Raises: OSError with nft's own message."""
        lib = self._lib
        context = lib.nft_ctx_new(0)
        try:
            lib.nft_ctx_buffer_error(context)
            if lib.nft_run_cmd_from_buffer(context, text.encode()) != 0:
                said = lib.nft_ctx_get_error_buffer(context) or b""
                raise OSError(f"nftables refused the sandbox's rules: {said.decode().strip()}")
        finally:
            lib.nft_ctx_free(context)


_nftables: _Nftables | None = None
_loaded = threading.Lock()


def nftables_available() -> str:
    """ "" when libnftables can be loaded, else why not (network is then off)."""
    try:
        _library()
    except OSError as exc:
        return f"libnftables cannot be loaded ({exc}): install Debian's libnftables1"
    return ""


def _library() -> _Nftables:
    global _nftables
    with _loaded:
        if _nftables is None:
            _nftables = _Nftables()
        return _nftables


def _in_namespace(pidfd: int, work: Callable[[], T]) -> T:
    """``work()`` in a fresh thread that has entered the network namespace of ``pidfd``."""
    result: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            if _libc.setns(pidfd, _CLONE_NEWNET) != 0:
                number = ctypes.get_errno()
                raise OSError(number, f"setns into the sandbox: {os.strerror(number)}")
            result.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=body, name="corral-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _routes() -> None:
    from pyroute2 import IPRoute

    with IPRoute() as route:
        (lo,) = route.link_lookup(ifname="lo")
        route.link("set", index=lo, state="up")
        route.route("replace", dst="0.0.0.0/0", oif=lo, prefsrc="127.0.0.1")
        route.route("replace", family=socket.AF_INET6, dst="::/0", oif=lo)


def _listeners() -> LinkSockets:
    made = LinkSockets()
    try:
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            tcp = socket.socket(family, socket.SOCK_STREAM)
            made.tcp.append(tcp)
            dns = socket.socket(family, socket.SOCK_DGRAM)
            made.dns.append(dns)
            if family == socket.AF_INET6:
                tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                dns.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            tcp.bind((address, TCP_PORT))
            tcp.listen(_BACKLOG)
            dns.bind((address, DNS_PORT))
        for sock in (*made.tcp, *made.dns):
            sock.setblocking(False)
    except BaseException:
        made.close()
        raise
    return made


def _set_up() -> LinkSockets:
    _routes()
    sockets = _listeners()
    try:
        _library().run(RULESET)
        # Without conntrack's sysctl, the default 120 s.
        with contextlib.suppress(OSError), open(_TIME_WAIT, "w") as knob:
            knob.write(str(_TIME_WAIT_SECONDS))
    except BaseException:
        sockets.close()
        raise
    return sockets


def open_link(pidfd: int) -> LinkSockets:
    """Give the sandbox of ``pidfd`` its way out (blocking: call it from a worker thread).

    Raises:
        IsolationError: the namespace could not be set up (nftables missing, say).
    """
    try:
        return _in_namespace(pidfd, _set_up)
    except (OSError, ImportError) as exc:
        raise IsolationError(f"cannot give the sandbox its network: {exc}") from exc


def original_destination(sock: Any) -> tuple[str, int]:
    """Where a redirected connection was going: (address, port). ``sock`` is a socket or
    anything with its ``family`` and ``getsockopt`` (asyncio's transport socket)."""
    if sock.family == socket.AF_INET:
        raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
        port, packed = struct.unpack_from("!2xH4s", raw)
        return socket.inet_ntop(socket.AF_INET, packed), port
    raw = sock.getsockopt(socket.IPPROTO_IPV6, _SO_ORIGINAL_DST, 28)
    port, packed = struct.unpack_from("!2xH4x16s", raw)
    return socket.inet_ntop(socket.AF_INET6, packed), port
