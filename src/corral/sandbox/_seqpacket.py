"""One JSON message per SOCK_SEQPACKET packet, with file descriptors as SCM_RIGHTS.

Used between trusted processes only: the engine and the zygote, the engine and a session
holder. Worker traffic uses the framed protocol instead. The zygote and the holder use the blocking
half only; the engine's async half imports anyio when it first has to wait, so that the
zygote (and every worker forked from it) never loads it.
"""

from __future__ import annotations

import array
import json
import socket
from typing import Any

__all__ = ["MAX_FDS", "MESSAGE_BYTES", "areceive", "asend", "receive", "send"]

MAX_FDS = 4
MESSAGE_BYTES = 65536


def _fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, raw in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(raw[: len(raw) - (len(raw) % fds.itemsize)])
    return list(fds)


def _decode(data: bytes) -> dict[str, Any] | None:
    """A message, or None (as for a closed peer) when it is not a JSON object."""
    try:
        message = json.loads(data)
    except ValueError:  # UnicodeDecodeError is one
        return None
    return message if isinstance(message, dict) else None


def _ancillary(fds: list[int]) -> list[tuple[int, int, bytes]]:
    if not fds:
        return []
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    sock.sendmsg([json.dumps(message).encode()], _ancillary(fds or []))


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """Blocking receive; (None, fds) when the peer closed."""
    data, ancdata, _flags, _addr = sock.recvmsg(MESSAGE_BYTES, socket.CMSG_SPACE(MAX_FDS * 4))
    fds = _fds(ancdata)
    if not data:
        return None, fds
    return json.loads(data), fds


async def asend(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    payload = [json.dumps(message).encode()]
    ancillary = _ancillary(fds or [])
    while True:
        try:
            sock.sendmsg(payload, ancillary)
            return
        except BlockingIOError:
            import anyio

            await anyio.wait_writable(sock)


async def areceive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """Receive on a non-blocking socket; (None, fds) when the peer closed or failed, or sent
    something that is not a JSON object (the engine side never trusts a sandbox's bytes)."""
    while True:
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(
                MESSAGE_BYTES, socket.CMSG_SPACE(MAX_FDS * 4)
            )
            break
        except BlockingIOError:
            import anyio

            try:
                await anyio.wait_readable(sock)
            except anyio.ClosedResourceError:
                return None, []
        except OSError:
            return None, []
    fds = _fds(ancdata)
    if not data:
        return None, fds
    return _decode(data), fds
