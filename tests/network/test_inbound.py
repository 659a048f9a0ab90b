"""Connections into a sandbox's network namespace (E2B's ports): to a real server in a real
namespace of its own, made by ``unshare --net`` and gone with its process."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from corral.network import Inbound, PortClosed

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.isolation,
    pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is missing"),
]

_PORT = 8123
_SERVER = f"""
import fcntl, socket, struct
# Bring up lo (SIOCSIFFLAGS: IFF_UP | IFF_LOOPBACK | IFF_RUNNING).
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", 0x1 | 0x8 | 0x40).ljust(40, b"\\0"))
server = socket.create_server(("127.0.0.1", {_PORT}))
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    conn.sendall(conn.recv(100).upper())
    conn.close()
"""


@pytest.fixture
def namespaced_server() -> Iterator[int]:
    """A pidfd of a server alone in a network namespace, echoing upper-cased."""
    process = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", _SERVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "listening\n"
        pidfd = os.pidfd_open(process.pid)
        try:
            yield pidfd
        finally:
            os.close(pidfd)
    finally:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


async def _echo(sock: socket.socket, text: bytes) -> bytes:
    with sock:
        sock.setblocking(True)
        sock.settimeout(10)
        sock.sendall(text)
        return sock.recv(100)


async def test_a_connection_reaches_the_server_inside_and_no_other(namespaced_server: int) -> None:
    with socket.socket() as outside:  # the host's port of that number has nothing behind it
        assert outside.connect_ex(("127.0.0.1", _PORT)) != 0
    inbound = Inbound(namespaced_server)
    try:
        assert await _echo(await inbound.connect(_PORT), b"first") == b"FIRST"
        with pytest.raises(PortClosed):
            await inbound.connect(_PORT + 1)
    finally:
        inbound.close()


async def test_connections_from_the_reserve_enter_no_namespace(
    namespaced_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Entering the namespace takes a thread of its own: once the reserve is made, a
    # connection to a listening port must need none (the bug: each took the slow way).
    inbound = Inbound(namespaced_server)
    try:
        assert await _echo(await inbound.connect(_PORT), b"warm") == b"WARM"
        entered: list[str] = []
        start = threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            entered.append(thread.name)
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", counted)
        for index in range(3):
            answer = await _echo(await inbound.connect(_PORT), b"again %d" % index)
            assert answer == b"AGAIN %d" % index
        assert [name for name in entered if name == "corral-netns"] == []
    finally:
        inbound.close()
