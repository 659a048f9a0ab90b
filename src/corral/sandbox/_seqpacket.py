"""One control message per SOCK_SEQPACKET packet, with file descriptors as SCM_RIGHTS.

Used between corral's own processes: the engine and the zygote, the engine and a session
holder (``_control_protocol`` says what the packets hold). Worker traffic uses the framed
protocol instead. The zygote and the holder use the blocking half only; the engine's async
half imports anyio when it first has to wait, so that the zygote (and every worker forked
from it) never loads it. A receiver owns every descriptor that arrives with a packet.
"""

from __future__ import annotations

import socket

from corral.sandbox._control_protocol import ControlMessage, encode
from corral.sandbox._descriptors import ancillary_space, received, rights

__all__ = ["MAX_FDS", "MESSAGE_BYTES", "areceive", "asend", "receive", "send"]

MAX_FDS = 8
"""Descriptors one packet may carry; more are cut (and closed by the kernel)."""
MESSAGE_BYTES = 65536
_ANCILLARY_BYTES = ancillary_space(MAX_FDS)


def send(sock: socket.socket, message: ControlMessage, fds: list[int] | None = None) -> None:
    sock.sendmsg([encode(message)], rights(fds or []))


def receive(sock: socket.socket) -> tuple[bytes | None, list[int]]:
    """Blocking receive: the packet, or None when the peer closed; and its descriptors."""
    data, ancdata, _flags, _addr = sock.recvmsg(MESSAGE_BYTES, _ANCILLARY_BYTES)
    return data or None, received(ancdata)


async def asend(sock: socket.socket, message: ControlMessage, fds: list[int] | None = None) -> None:
    payload = [encode(message)]
    ancillary = rights(fds or [])
    while True:
        try:
            sock.sendmsg(payload, ancillary)
            return
        except BlockingIOError:
            import anyio

            await anyio.wait_writable(sock)


async def areceive(sock: socket.socket) -> tuple[bytes | None, list[int]]:
    """Receive on a non-blocking socket: None when the peer closed or failed."""
    while True:
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(MESSAGE_BYTES, _ANCILLARY_BYTES)
            break
        except BlockingIOError:
            import anyio

            try:
                await anyio.wait_readable(sock)
            except anyio.ClosedResourceError:
                return None, []
        except OSError:
            return None, []
    return data or None, received(ancdata)
