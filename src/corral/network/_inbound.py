"""A way in: a connection to a port inside a sandbox, made from inside its network namespace.

E2B's ``get_host(port)`` reaches a server the code started in its sandbox. corral opens no
link for it: the engine (root) makes the socket from a fresh thread that has entered the
sandbox's network namespace through its holder's pidfd, connects it to the sandbox's own
loopback, and hands it back. A socket keeps the namespace it was made in, so the rest of the
connection is ordinary I/O on the engine's side. Nothing is made on the host, and the sandbox
never holds anything of the engine's: the engine only ever connects out of its namespace's
loopback to a listening port, as a client inside the sandbox would.

A sandbox without a network has never had its loopback brought up: an E2B sandbox has it
brought up at its start (``loopback_up``), and a connection in brings it up where it is still
down (a loopback reaches nothing outside the namespace).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import socket
import struct

import anyio

from corral.errors import IsolationError
from corral.network._link import _in_namespace as in_namespace

__all__ = ["Inbound", "InsideStream", "PortClosed", "connect_inside", "loopback_up"]

_CONNECT_SECONDS = 5.0  # a loopback connect is answered at once unless its backlog is full
_LOOPBACKS = ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"))
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40
_IFREQ_BYTES = 40  # struct ifreq
RESERVE = 8
"""Unconnected sockets made inside a sandbox's namespace at a time, for connections in: a
thread enters the namespace once per ``RESERVE`` connections, not once per connection."""


class PortClosed(Exception):
    """Nothing listens on that port inside the sandbox."""


def _loopback_up() -> None:
    # One ioctl on a socket of the namespace: no netlink library needed for one flag.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING)
        fcntl.ioctl(sock, _SIOCSIFFLAGS, request.ljust(_IFREQ_BYTES, b"\0"))


def _connect(port: int) -> socket.socket:
    refused: OSError | None = None
    for family, address in _LOOPBACKS:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(_CONNECT_SECONDS)
        try:
            try:
                sock.connect((address, port))
            except OSError as exc:
                if exc.errno not in (errno.ENETUNREACH, errno.EADDRNOTAVAIL):
                    raise
                _loopback_up()
                sock.connect((address, port))
        except (ConnectionRefusedError, TimeoutError) as exc:
            sock.close()
            refused = exc
            continue
        except OSError as exc:
            sock.close()
            if family == socket.AF_INET6 and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                break  # no IPv6 in this kernel: IPv4's refusal stands
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        return sock
    raise PortClosed(f"nothing listens on port {port}") from refused


def loopback_up(pidfd: int) -> None:
    """Bring up the loopback of the sandbox of ``pidfd`` (blocking: call it from a worker
    thread), so that its code reaches its own servers on localhost, as on E2B.

    Raises:
        IsolationError: the namespace could not be entered.
    """
    try:
        in_namespace(pidfd, _loopback_up)
    except OSError as exc:
        raise IsolationError(f"cannot bring up the sandbox's loopback: {exc}") from exc


def connect_inside(pidfd: int, port: int) -> socket.socket:
    """A non-blocking socket connected to ``port`` on the loopback of the sandbox of ``pidfd``
    (blocking: call it from a worker thread).

    Raises:
        PortClosed: nothing listens there (on 127.0.0.1 nor on ::1).
        IsolationError: the namespace could not be entered.
    """
    try:
        return in_namespace(pidfd, lambda: _connect(port))
    except PortClosed:
        raise
    except (OSError, ImportError) as exc:
        raise IsolationError(f"cannot reach into the sandbox: {exc}") from exc


def _connected_now(sock: socket.socket) -> bool:
    # A loopback handshake is done by the time connect returns, mostly (its packets go
    # through the kernel at once): asking costs one poll, waiting a turn of the event loop.
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return bool(poller.poll(0))


class Inbound:
    """One sandbox's connections in: from a reserve of IPv4 sockets made inside its namespace
    (a socket keeps the namespace it was made in, wherever it is connected from), connected
    on the event loop; a refusal is tried again the slow way (IPv6, a loopback still down).
    The reserve holds ``RESERVE`` descriptors at most, and nothing once closed."""

    def __init__(self, pidfd: int) -> None:
        self._pidfd = os.dup(pidfd)  # its holder may close its own first
        self._ready: list[socket.socket] = []
        self._closed = False

    def _make(self) -> list[socket.socket]:
        def make() -> list[socket.socket]:
            return [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(RESERVE)]

        try:
            return in_namespace(self._pidfd, make)
        except OSError as exc:
            raise IsolationError(f"cannot reach into the sandbox: {exc}") from exc

    async def connect(self, port: int) -> socket.socket:
        """A non-blocking socket connected to ``port`` on the sandbox's loopback.

        Raises:
            PortClosed: nothing listens there.
            IsolationError: the namespace could not be entered.
        """
        if self._closed:
            raise IsolationError("the sandbox is closed")
        if not self._ready:
            made = await anyio.to_thread.run_sync(self._make)
            if self.closed():  # while the thread made them
                for sock in made:
                    sock.close()
                raise IsolationError("the sandbox is closed")
            self._ready += made
        sock = self._ready.pop()
        sock.setblocking(False)
        failed = sock.connect_ex(("127.0.0.1", port))
        if failed in (errno.EINPROGRESS, errno.EAGAIN):
            if not _connected_now(sock):
                try:
                    with anyio.fail_after(_CONNECT_SECONDS):
                        await anyio.wait_writable(sock)
                except TimeoutError:
                    sock.close()
                    raise PortClosed(f"port {port} accepts nothing: its backlog is full") from None
            failed = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if failed == 0:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        sock.close()
        pidfd = os.dup(self._pidfd)
        try:
            return await anyio.to_thread.run_sync(connect_inside, pidfd, port)
        finally:
            os.close(pidfd)

    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        for sock in self._ready:
            sock.close()
        self._ready.clear()
        with contextlib.suppress(OSError):
            os.close(self._pidfd)
        self._pidfd = -1


class InsideStream:
    """A connected socket into a sandbox, read and written directly: each call tries the
    socket first and waits on the event loop only when it would block (a small exchange on
    loopback then costs no turn of the loop). Raises anyio's EndOfStream at the peer's end
    and BrokenResourceError when the peer reset it."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self._sock.send(view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
            except OSError as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc

    async def receive(self, max_bytes: int) -> bytes:
        while True:
            try:
                data = self._sock.recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def send_eof(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    async def __aenter__(self) -> InsideStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._sock.close()
