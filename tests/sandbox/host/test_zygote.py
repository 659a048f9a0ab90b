"""The zygote handle: started through anyio, stopped in stages, always reaped."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from corral.sandbox import Zygote

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
