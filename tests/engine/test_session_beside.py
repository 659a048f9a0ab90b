"""Interpreters beside a session's own (``Session.run(interpreter=...)``): state of their own,
runs side by side, the session's files shared, and who a restart or a pause ends."""

from __future__ import annotations

import functools

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine

pytestmark = pytest.mark.anyio

_WAIT_FOR = """
import os, time
open({mine!r}, 'w').close()
for _ in range(4000):  # bounded: 20 s
    if os.path.exists({theirs!r}):
        break
    time.sleep(0.005)
os.path.exists({theirs!r})
"""
"""Each run says it is here, then waits for the other to say so: both come back True only
if neither waited for the other to end first."""


async def test_runs_in_two_interpreters_of_one_session_go_side_by_side(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session() as session:
        results: dict[str, str | None] = {}

        async def run(name: str, mine: str, theirs: str) -> None:
            result = await session.run(_WAIT_FOR.format(mine=mine, theirs=theirs), interpreter=name)
            results[name] = result.text

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "", "/mnt/data/own", "/mnt/data/beside")
            tg.start_soon(run, "other", "/mnt/data/beside", "/mnt/data/own")
        assert results == {"": "True", "other": "True"}


async def test_each_interpreter_has_its_own_state_and_the_sessions_files(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run("x = 1\nopen('shared.txt', 'w').write('own')")).ok
        assert (await session.run("x = 2", interpreter="b")).ok
        beside = await session.run("x, open('shared.txt').read()", interpreter="b")
        assert beside.text == "(2, 'own')"
        assert (await session.run("x")).text == "1"
        pids = await session.run("import os; os.getpid()")
        other = await session.run("import os; os.getpid()", interpreter="b")
        assert pids.text != other.text


async def test_closing_one_beside_ends_only_it(real_engine: Engine) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run("x = 'own'")).ok
        assert (await session.run("x = 'beside'", interpreter="b")).ok
        await session.close_interpreter("b")
        fresh = await session.run("'x' in dir()", interpreter="b")
        assert fresh.text == "False"
        assert (await session.run("x")).text == "'own'"


async def test_a_restart_of_the_sessions_own_interpreter_ends_the_others_too(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run("x = 'beside'", interpreter="b")).ok
        stopped = await session.run("while True: pass", limits=Limits(timeout=0.5))
        assert (stopped.outcome, stopped.restarted) == ("timeout", True)
        after = await session.run("'x' in dir()", interpreter="b")
        assert (after.ok, after.restarted, after.text) == (True, True, "False")


async def test_a_deadline_beside_restarts_only_that_interpreter(real_engine: Engine) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run("x = 'own'")).ok
        stopped = await session.run("while True: pass", limits=Limits(timeout=0.5), interpreter="b")
        assert (stopped.outcome, stopped.restarted) == ("timeout", True)
        assert (await session.run("x")).text == "'own'"
        assert (await session.run("1 + 1", interpreter="b")).text == "2"


async def test_a_full_pause_freezes_them_all_and_resume_thaws_them(real_engine: Engine) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run("x = 'beside'", interpreter="b")).ok
        assert await session.pause("full") == "full"
        if not session.pause_state.frozen:
            pytest.skip("no cgroup freezer here: a full pause goes to disk")
        woken = await session.run("x", interpreter="b")  # a run beside wakes it too
        assert woken.text == "'beside'"
        assert session.paused is None


async def test_a_session_runs_at_most_its_interpreters(engine: Engine) -> None:
    async with await engine.open_session() as session:
        for index in range(1, 16):
            assert (await session.run("1", interpreter=f"n{index}")).ok
        with pytest.raises(ValueError, match="at most 16 interpreters"):
            await session.run("1", interpreter="one-too-many")


async def test_pauses_and_a_run_beside_at_once_all_finish(real_engine: Engine) -> None:
    # A run beside takes its own lock, then the session's to resume it; a pause takes them
    # all: if a pause took the session's first, the two would wait for each other for ever.
    async with await real_engine.open_session() as session:
        assert (await session.run("x = 'beside'", interpreter="b")).ok
        assert await session.pause("full") == "full"
        seen: dict[str, object] = {}

        async def pause(name: str) -> None:
            seen[name] = await session.pause("full")

        async def run() -> None:
            seen["run"] = (await session.run("x", interpreter="b")).text

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pause, "first")
                tg.start_soon(pause, "second")
                tg.start_soon(run)
        assert seen == {"first": "full", "second": "full", "run": "'beside'"}


async def test_a_run_in_a_new_interpreter_waits_for_a_pause_under_way(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session() as session:
        results: dict[str, object] = {}

        async def own() -> None:
            results["own"] = (await session.run("import time; time.sleep(1.5)")).outcome

        async def pause() -> None:
            results["pause"] = await session.pause("full")

        async def new() -> None:
            done = await session.run("import time; time.sleep(2); 'ran'", interpreter="new")
            results["new"] = (done.outcome, done.text)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(own)
                await anyio.wait_all_tasks_blocked()  # its run holds the session's own lock
                tg.start_soon(pause)
                await anyio.wait_all_tasks_blocked()  # the pause waits for that run
                tg.start_soon(new)  # an interpreter the pause did not know when it began
        # Not frozen in the middle: it started once the pause was over, and woke the session.
        assert results == {"own": "ok", "pause": "full", "new": ("ok", "'ran'")}
        assert session.paused is None


async def test_a_closing_interpreters_slot_is_not_given_to_a_new_one(real_engine: Engine) -> None:
    async with await real_engine.open_session() as session:
        seen: dict[str, object] = {}

        async def spin() -> None:
            seen["spin"] = (await session.run("while True: pass", interpreter="b")).outcome

        async def new() -> None:
            done = await session.run("'c ran'", interpreter="c")
            seen["new"] = (done.outcome, done.text)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(spin)
                await anyio.wait_all_tasks_blocked()  # b runs, in slot 1
                tg.start_soon(session.close_interpreter, "b")
                tg.start_soon(new)  # c must not get slot 1 while b is still being ended
        assert seen["new"] == ("ok", "'c ran'")
        assert seen["spin"] != "ok"


_PID_FILE = """
import os, time
for _ in range(2000):  # bounded: 10 s for the run beside to start
    if os.path.exists('/mnt/data/b.pid') and open('/mnt/data/b.pid').read():
        break
    time.sleep(0.005)
open('/mnt/data/b.pid').read()
"""
_STATE_OF = """
import os, time
for _ in range(400):  # bounded: 2 s for the holder to kill and reap it
    try:
        state = open('/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]
    except FileNotFoundError:
        state = 'gone'
        break
    if state == 'Z':
        break
    time.sleep(0.005)
state
"""


async def test_closing_one_that_left_its_process_group_still_ends_it(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session() as session:
        own_group = (await session.run("import os; os.getpgrp()")).text
        spin = (
            f"import os\nos.setpgid(0, {own_group})\n"
            "open('/mnt/data/b.pid', 'w').write(str(os.getpid()))\nwhile True: pass"
        )
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(session.run, spin, interpreter="b"))
                pid = (await session.run(_PID_FILE)).text
                await session.close_interpreter("b")
        assert pid is not None
        state = await session.run(_STATE_OF.format(pid=pid.strip("'")))
        assert state.text in ("'gone'", "'Z'"), state.text
