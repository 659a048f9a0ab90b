"""The case server handle against a real worker: the server's own timer, EOF, retirement."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from corral.errors import WorkerCrashed
from corral.sandbox import CaseServer, RunLimits, RunRequest, Zygote

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = RunLimits(
    memory_bytes=256 << 20, cpu_seconds=30, pids=32, file_bytes=1 << 20, open_files=64,
    max_files=4, max_file_bytes=1 << 20, max_display=4, display_bytes=1 << 20,
    output_chars=10_000,
)  # fmt: skip


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def feed(self, data: bytes) -> None:
        self.data += data


@pytest.fixture(scope="module")
async def zygote() -> AsyncIterator[Zygote]:
    async with anyio.create_task_group() as tg:
        started = Zygote(preload=())
        await started.start(tg)
        try:
            yield started
        finally:
            await started.aclose()


async def _server(zygote: Zygote, code: str) -> CaseServer:
    worker = await zygote.spawn()
    await worker.wait_ready()
    server = CaseServer(worker, work_bytes=128 << 20)
    await server.prepare(code)
    return server


async def test_the_server_kills_an_overdue_case_on_its_own(zygote: Zygote) -> None:
    server = await _server(zygote, "print('begun', flush=True)\nwhile True: pass")
    try:
        case = await server.start(0.2)  # the engine sets no deadline of its own here
        out, err = _Sink(), _Sink()
        with anyio.fail_after(20), pytest.raises(WorkerCrashed):
            await case.execute(RunRequest(code="", limits=LIMITS), out, err, lambda: None)
        ended = await server.stop(5)
        case.close()
        assert ended is not None
        assert (ended.timed_out, ended.clean) == (True, True)
        assert out.data == b"begun\n"
        again = await server.start(0.1)  # the same server goes on with the next case
        try:
            with anyio.fail_after(20), pytest.raises(WorkerCrashed):  # it loops to its timer
                await again.execute(RunRequest(code="", limits=LIMITS), out, err, lambda: None)
        finally:
            again.close()
        assert out.data == b"begun\nbegun\n"
    finally:
        server.retire()


async def test_a_finished_case_is_stopped_and_the_server_stays(zygote: Zygote) -> None:
    server = await _server(zygote, "print(input())")
    try:
        for word in (b"one", b"two"):
            case = await server.start(10)
            out, err = _Sink(), _Sink()
            request = RunRequest(code="", limits=LIMITS, stdin=word)
            with anyio.fail_after(20):
                report = await case.execute(request, out, err, lambda: None)
            assert report.done.error is None
            assert out.data == word + b"\n"
            ended = await server.stop(5)
            case.close()
            assert ended is not None
            assert (ended.timed_out, ended.clean) == (False, True)
        assert not server.worker.closed
    finally:
        server.retire()
    assert server.worker.closed  # killed by its pidfd, descriptors released


async def test_a_stop_can_be_begun_now_and_waited_for_later(zygote: Zygote) -> None:
    server = await _server(zygote, "open('left.txt', 'x').write(input())\nprint('wrote')")
    try:
        case = await server.start(10)
        out, err = _Sink(), _Sink()
        request = RunRequest(code="", limits=LIMITS, stdin=b"x")
        with anyio.fail_after(20):
            await case.execute(request, out, err, lambda: None)
        case.close()
        await server.begin_stop(5)
        with pytest.raises(RuntimeError, match="end_stop"):
            await server.start(10)  # its folders may not be restored yet
        ended = await server.end_stop(5)
        assert ended is not None
        assert (ended.timed_out, ended.clean) == (False, True)
        assert await server.end_stop(5) is None  # nothing left to wait for
        again = await server.start(10)
        try:
            check = RunRequest(code="", limits=LIMITS, stdin=b"y")
            with anyio.fail_after(20):
                report = await again.execute(check, out, err, lambda: None)
        finally:
            again.close()
        assert report.done.error is None  # left.txt was wiped, then written afresh
        assert out.data == b"wrote\nwrote\n"
        assert not server.retired
    finally:
        server.retire()


async def test_a_server_that_is_gone_fails_the_case_and_retires(zygote: Zygote) -> None:
    server = await _server(zygote, "print(1)")
    server.worker.kill()
    with anyio.fail_after(20):
        try:
            case = await server.start(10)
        except WorkerCrashed:
            pass
        else:
            with pytest.raises(WorkerCrashed):
                await case.execute(
                    RunRequest(code="", limits=LIMITS), _Sink(), _Sink(), lambda: None
                )
            case.close()
        assert await server.stop(1) is None
    assert server.retired
