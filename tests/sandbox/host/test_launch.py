"""A zygote started ahead of its handle: adopted by the first Zygote of the same
configuration, ended when nobody adopts it, and never needed for a start to work."""

from __future__ import annotations

import os

import anyio
import pytest

from corral._uids import DEFAULT_UID_RANGE
from corral.errors import IsolationError
from corral.sandbox import Zygote, prelaunched
from corral.sandbox.host import _launch

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

UIDS = DEFAULT_UID_RANGE.split()[0]


def _alive(pid: int) -> bool:
    """A process or a zombie with this pid (ours to reap, so it cannot be reused)."""
    return os.path.exists(f"/proc/{pid}")


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as status:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in status)}


def _early_pids() -> list[int]:
    return [launched.process.pid for _config, launched in _launch._early]


async def _serves_isolated_workers(zygote: Zygote) -> None:
    """A worker of this zygote starts, init of its own pid namespace, under seccomp."""
    worker = await zygote.spawn()
    try:
        await worker.wait_ready()
        fields = _status(worker.pid)
        assert fields["NSpid"].split()[-1] == "1"
        assert fields["Seccomp"] == "2"
    finally:
        worker.close()


async def test_a_zygote_of_the_same_configuration_adopts_it() -> None:
    with prelaunched(preload=(), uids=UIDS, prewarm=False):
        (early,) = _early_pids()
        async with anyio.create_task_group() as tg:
            zygote = Zygote(preload=(), uids=UIDS, prewarm=False)
            await zygote.start(tg)
            try:
                assert zygote.pid == early
                assert _early_pids() == []  # adopted once, never twice
                await _serves_isolated_workers(zygote)
            finally:
                await zygote.aclose()
    assert not _alive(early)


async def test_one_nobody_adopts_is_ended_with_the_block() -> None:
    with prelaunched(preload=(), uids=UIDS, prewarm=False):
        (early,) = _early_pids()
        async with anyio.create_task_group() as tg:
            zygote = Zygote(preload=(), uids=UIDS)  # prewarmed: another configuration
            await zygote.start(tg)
            try:
                assert zygote.pid != early
                await _serves_isolated_workers(zygote)
            finally:
                await zygote.aclose()
        assert _alive(early)  # still waiting to be adopted
    assert _early_pids() == []
    assert not _alive(early)  # killed and reaped


async def test_a_failed_early_start_leaves_the_normal_start_to_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(**_kw: object) -> dict[str, object]:
        raise IsolationError("the runtime directory is a link")

    with monkeypatch.context() as patch:
        patch.setattr(_launch, "zygote_config", refuse)
        with prelaunched(preload=(), uids=UIDS, prewarm=False):
            assert _early_pids() == []
    async with anyio.create_task_group() as tg:
        zygote = Zygote(preload=(), uids=UIDS, prewarm=False)
        await zygote.start(tg)
        try:
            await _serves_isolated_workers(zygote)
        finally:
            await zygote.aclose()
