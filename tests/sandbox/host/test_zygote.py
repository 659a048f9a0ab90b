"""The zygote handle: started through anyio, stopped in stages, always reaped."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys

import anyio
import pytest

from corral.sandbox import Zygote
from corral.sandbox.host._zygote import _Reaped

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]


def _gone(pid: int) -> bool:
    """No process and no zombie left with this pid (ours to reap, so it cannot be reused)."""
    return not os.path.exists(f"/proc/{pid}")


def _pid_of(zygote: Zygote) -> int:
    assert zygote.pid is not None
    return zygote.pid


async def test_a_healthy_zygote_exits_once_its_socket_closes() -> None:
    async with anyio.create_task_group() as tg:
        zygote = Zygote(preload=())
        await zygote.start(tg)
        pid = _pid_of(zygote)
        worker = await zygote.spawn()
        await worker.wait_ready()
        watch = os.pidfd_open(worker.pid)
        try:
            await zygote.aclose()
            with anyio.fail_after(10):  # its worker goes with it, by its parent-death signal
                await anyio.wait_readable(watch)
        finally:
            os.close(watch)
            worker.close()
    assert zygote.dead.is_set()
    assert _gone(pid)


async def test_a_wedged_zygote_is_killed_and_reaped() -> None:
    async with anyio.create_task_group() as tg:
        zygote = Zygote(preload=())
        await zygote.start(tg)
        pid = _pid_of(zygote)
        os.kill(pid, signal.SIGSTOP)  # it can neither exit nor act on SIGTERM now
        await zygote.aclose()
    assert _gone(pid)
    assert zygote._process is not None
    assert zygote._process.returncode == -signal.SIGKILL


def _reads_until_eof() -> tuple[socket.socket, _Reaped]:
    """A child that exits at EOF on its stdin, as the zygote does on its control socket."""
    ours, theirs = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=theirs.fileno()
    )
    theirs.close()
    return ours, _Reaped(child)


async def test_its_exit_is_seen_after_the_control_socket_closes_under_a_watcher() -> None:
    # The zygote's exit follows the close of its control socket, which the read loop was
    # watching: a pidfd opened only then would take that descriptor's number, which the event
    # loop still counts as watched, and the exit would go unseen until a grace ran out.
    ours, process = _reads_until_eof()

    async def watch() -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            await anyio.wait_readable(ours)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.wait_all_tasks_blocked()
        anyio.notify_closing(ours)
        ours.close()
        with anyio.fail_after(10):
            assert await process.wait() == 0


async def test_a_worker_knows_when_it_has_exited_whatever_its_pidfds_number() -> None:
    # Past select's FD_SETSIZE (1024), as in a server holding many connections.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), max(hard, 2048)))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        async with anyio.create_task_group() as tg:
            zygote = Zygote(preload=())
            await zygote.start(tg)
            try:
                worker = await zygote.spawn_ready()
                assert worker._pidfd is not None
                assert worker._pidfd > 1024
                assert not worker.exited()
                watch = os.pidfd_open(worker.pid)
                try:
                    worker.kill()
                    with anyio.fail_after(10):
                        await anyio.wait_readable(watch)
                finally:
                    os.close(watch)
                assert worker.exited()
                worker.close()
                assert worker.exited()
            finally:
                await zygote.aclose()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
