"""Engine sessions: state, restarts, files, quota, close and expiry with real workers; the files
API's streaming and the context manager on the sandbox's in-process twin."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, RunEvent, Session
from corral.errors import (
    FileNotReturned,
    FileTooLarge,
    InvalidPath,
    SessionClosed,
    SessionDiskFull,
    SessionNotFound,
)

pytestmark = pytest.mark.anyio

LIMITS = Limits(timeout=10)
QUOTA = 4 * 1024 * 1024


@pytest.fixture(scope="module")
async def real_engine() -> AsyncIterator[Engine]:
    """Real workers, with a session disk quota the kernel enforces."""
    async with Engine(capacity=2, limits=LIMITS, session_disk_bytes=QUOTA) as started:
        yield started


@pytest.fixture
async def session(real_engine: Engine) -> AsyncIterator[Session]:
    opened = await real_engine.open_session()
    yield opened
    await opened.close()


async def test_state_persists_and_the_cwd_is_the_session_folder(session: Session) -> None:
    await session.run("import json\nx = 41")
    result = await session.run("import os\nx + 1, json.__name__, os.getcwd()")
    assert result.result == {"text/plain": "(42, 'json', '/mnt/data')"}
    assert result.restarted is False


async def test_a_deadline_restarts_the_interpreter_but_keeps_files(session: Session) -> None:
    await session.run("x = 1\nopen('kept.txt', 'w').write('still here')")
    started = time.perf_counter()
    late = await session.run(
        "import time\nprint('before')\ntime.sleep(60)", limits=Limits(timeout=1)
    )
    assert time.perf_counter() - started < 4
    assert (late.outcome, late.restarted) == ("timeout", True)
    assert late.stdout == "before\n"
    assert "time limit" in late.stderr
    assert "interpreter was restarted" in late.stderr
    after = await session.run("print(open('kept.txt').read())\n'x' in globals()")
    assert after.stdout == "still here\n"
    assert after.result == {"text/plain": "False"}  # variables are gone
    assert after.restarted is True  # and the next result says so


async def test_a_dying_interpreter_fails_at_once_and_restarts(session: Session) -> None:
    started = time.perf_counter()
    died = await session.run("import os\nos._exit(3)")
    assert time.perf_counter() - started < 4
    assert (died.outcome, died.restarted) == ("worker_error", True)
    assert (await session.run("6 * 7")).result == {"text/plain": "42"}


async def test_files_api_round_trip_owned_by_the_sandbox_user(session: Session) -> None:
    info = await session.put_file("in/data.csv", b"a,b\n1,2\n")
    assert (info.path, info.size) == ("in/data.csv", 8)
    result = await session.run(
        "import os\nopen('in/data.csv').read(), os.stat('in/data.csv').st_uid\n"
    )
    assert result.result == {"text/plain": "('a,b\\n1,2\\n', 1000)"}
    await session.run("open('in/data.csv', 'a').write('3,4\\n')")  # writable by the code
    assert await session.get_file("in/data.csv") == b"a,b\n1,2\n3,4\n"
    assert [(f.path, f.size) for f in await session.list_files()] == [("in/data.csv", 12)]
    await session.delete_file("in/data.csv")
    with pytest.raises(FileNotFoundError):
        await session.get_file("in/data.csv")


async def test_links_planted_by_code_are_never_followed(session: Session) -> None:
    planted = await session.run(
        "import os\nos.symlink('/etc/passwd', 'passwd')\nos.symlink('/', 'root')\n"
        "os.mkdir('d')\nos.symlink('/etc', 'd/etc')"
    )
    assert planted.outcome == "ok", planted.stderr
    for path in ("passwd", "root/etc/passwd", "d/etc/passwd", "../x", "/etc/passwd"):
        with pytest.raises(InvalidPath):
            await session.get_file(path)
    with pytest.raises(InvalidPath):
        await session.put_file("root/tmp/owned", b"x")
    assert await session.list_files() == []  # links are not listed


async def test_the_disk_quota_binds_the_api_and_the_code(session: Session) -> None:
    with pytest.raises(FileTooLarge):
        await session.put_file("big.bin", b"x" * (QUOTA + 1))
    await session.put_file("first.bin", b"x" * (QUOTA * 3 // 4))
    with pytest.raises(SessionDiskFull):
        await session.put_file("second.bin", b"x" * (QUOTA * 3 // 4))
    assert [f.path for f in await session.list_files()] == ["first.bin"]  # nothing half-written
    await session.delete_file("first.bin")
    code = f"with open('fill.bin', 'wb') as out:\n    out.write(b'x' * {QUOTA + 1})"
    filled = await session.run(code)
    assert filled.outcome == "python_error"
    assert filled.error is not None
    assert "No space left" in filled.error.message


async def test_close_during_a_run_ends_it_promptly(real_engine: Engine) -> None:
    session = await real_engine.open_session()
    outcome: list[str] = []

    async def run() -> None:
        outcome.append((await session.run("import time\ntime.sleep(60)")).outcome)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(5):
            while not session.busy:  # noqa: ASYNC110 - nothing signals "running"
                await anyio.sleep(0.01)
        started = time.perf_counter()
        await session.close()
    assert time.perf_counter() - started < 3
    assert outcome == ["cancelled"]
    with pytest.raises(SessionClosed):
        await session.run("1")
    with pytest.raises(SessionNotFound):
        real_engine.get_session(session.id)


@pytest.mark.isolation  # expiry reads time.monotonic(), which no mock clock moves
async def test_idle_sessions_expire() -> None:
    async with Engine(capacity=1, pool_size=1, session_idle_timeout=0.05) as engine:
        session = await engine.open_session(session_id="idle-one")
        assert engine.get_session("idle-one") is session
        with anyio.fail_after(10):
            while engine.sessions():  # noqa: ASYNC110 - expiry is a periodic sweep
                await anyio.sleep(0.1)
        assert session.closed
        with pytest.raises(SessionNotFound):
            engine.get_session("idle-one")


@pytest.mark.isolation  # expiry reads time.monotonic(), which no mock clock moves
async def test_a_held_session_outlives_idle_expiry() -> None:
    async with Engine(capacity=1, pool_size=1, session_idle_timeout=0.05) as engine:
        held = await engine.open_session(session_id="held")
        held.hold_for(3600)
        held.touch()  # use does not shorten the hold
        idle = await engine.open_session(session_id="idle")
        with anyio.fail_after(10):
            while not idle.closed:  # noqa: ASYNC110 - expiry is a periodic sweep
                await anyio.sleep(0.1)
        assert not held.closed  # the same sweep left it open
        assert engine.get_session("held") is held


async def test_put_file_streams_chunks_and_a_failed_stream_writes_nothing(
    engine: Engine,
) -> None:
    session = await engine.open_session()

    async def chunks(count: int, fail: bool = False) -> AsyncIterator[bytes]:
        for index in range(count):
            yield bytes([65 + index]) * 1024
        if fail:
            raise ValueError("the client went away")

    info = await session.put_file("streamed.bin", chunks(3))
    assert info.size == 3 * 1024
    assert await session.get_file("streamed.bin") == b"A" * 1024 + b"B" * 1024 + b"C" * 1024
    with pytest.raises(ValueError, match="went away"):
        await session.put_file("streamed.bin", chunks(2, fail=True))
    assert (await session.get_file("streamed.bin"))[:1024] == b"A" * 1024  # old content kept
    assert [f.path for f in await session.list_files()] == ["streamed.bin"]  # no temp file


async def test_results_list_the_files_the_run_created_or_changed(session: Session) -> None:
    await session.put_file("kept.txt", b"untouched")
    first = await session.run(
        "import os\nos.makedirs('out', exist_ok=True)\n"
        "open('out/o.txt', 'w').write('one')\nopen('log.txt', 'w').write('a')"
    )
    assert first.outcome == "ok", first.stderr
    assert sorted(f.path for f in first.files) == ["log.txt", "out/o.txt"]
    assert first.read_file("out/o.txt") == b"one"
    second = await session.run("open('log.txt', 'a').write('b')\nopen('kept.txt').read()")
    assert [(f.path, f.size) for f in second.files] == [("log.txt", 2)]  # appended; read only
    assert second.read_file("log.txt") == b"ab"
    with pytest.raises(FileNotReturned, match=r"'out/o\.txt' is not among"):
        second.read_file("out/o.txt")
    quiet = await session.run("x = 1")
    assert quiet.files == ()


async def test_sys_exit_in_a_session_keeps_its_state(session: Session) -> None:
    await session.run("x = 5")
    stopped = await session.run("import sys\nsys.exit(0)")
    assert (stopped.outcome, stopped.exit_code, stopped.restarted) == ("ok", 0, False)
    assert (await session.run("x")).text == "5"


async def test_a_session_is_an_async_context_manager(engine: Engine) -> None:
    async with await engine.open_session() as session:
        assert (await session.run("6 * 7")).text == "42"
    assert session.closed
    with pytest.raises(SessionNotFound):
        engine.get_session(session.id)


async def test_a_caller_abandoning_a_run_leaves_the_session_usable(session: Session) -> None:
    await session.run("open('kept.txt', 'w').write('k')\nx = 1")
    executing = anyio.Event()

    def on_event(event: RunEvent) -> None:
        if event.phase == "executing":
            executing.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: session.run("import time\ntime.sleep(60)", on_event=on_event))
        with anyio.fail_after(10):
            await executing.wait()
        tg.cancel_scope.cancel()  # the caller's own scope, not the run's deadline
    with anyio.fail_after(10):
        after = await session.run("print(open('kept.txt').read())\n'x' in globals()")
    assert (after.outcome, after.stdout, after.text) == ("ok", "k\n", "False")
    assert after.restarted is True


async def test_a_run_queued_behind_a_timed_out_one_gets_a_fresh_interpreter(
    session: Session,
) -> None:
    await session.run("x = 1")
    results: dict[str, ExecutionResult] = {}
    executing = anyio.Event()

    def on_event(event: RunEvent) -> None:
        if event.phase == "executing":
            executing.set()

    async def slow() -> None:
        code = "import time\ntry:\n    time.sleep(60)\nfinally:\n    time.sleep(0.3)"
        results["slow"] = await session.run(code, limits=Limits(timeout=1), on_event=on_event)

    async def queued() -> None:
        with anyio.fail_after(10):
            await executing.wait()
        results["queued"] = await session.run("'x' in globals()")

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        tg.start_soon(queued)
    assert (results["slow"].outcome, results["slow"].restarted) == ("timeout", True)
    queued_result = results["queued"]
    assert (queued_result.outcome, queued_result.text) == ("ok", "False"), queued_result.stderr
    assert queued_result.restarted is True


async def test_a_folder_the_code_made_unusable_comes_back_for_the_next_run(
    real_engine: Engine, session: Session
) -> None:
    denied = await session.run("import os\nopen('kept.txt', 'w').write('k')\nos.chmod('.', 0)")
    assert denied.outcome == "ok", denied.stderr
    assert [f.path for f in denied.files] == ["kept.txt"]  # still reported from it
    after = await session.run("import os\nprint(oct(os.stat('.').st_mode & 0o777), os.listdir())")
    assert (after.outcome, after.stdout) == ("ok", "0o755 ['kept.txt']\n"), after.stderr
    one_shot = await real_engine.run("import os\nopen('a.txt', 'w').write('a')\nos.chmod('.', 0)")
    assert one_shot.outcome == "ok", one_shot.stderr
    assert [f.path for f in one_shot.files] == ["a.txt"]
