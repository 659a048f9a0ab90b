"""Interrupting a session run with real workers: the interpreter and its variables stay when
the code comes back within the grace, and it is restarted when the code will not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine, OutputEvent, Session
from corral.sandbox import Holder

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

SHORT = Limits(timeout=1)
SPIN = "while True:\n    pass\n"


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=Limits(timeout=10)) as started:
        yield started


@pytest.fixture
async def session(engine: Engine) -> AsyncIterator[Session]:
    opened = await engine.open_session()
    yield opened
    await opened.close()


async def test_a_deadline_interrupts_and_keeps_the_variables(session: Session) -> None:
    await session.run("x = 41\nopen('kept.txt', 'w').write('file')")
    late = await session.run(SPIN, limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", False)
    assert "time limit" in late.stderr
    assert "variables and files are kept" in late.stderr
    assert "KeyboardInterrupt" in late.stderr  # the code saw the interrupt
    after = await session.run("x + 1, open('kept.txt').read()")
    assert after.result == {"text/plain": "(42, 'file')"}
    assert (after.outcome, after.restarted) == ("ok", False)


async def test_a_cancel_interrupts_and_keeps_the_variables(session: Session) -> None:
    await session.run("x = 41")
    cancel = anyio.Event()

    def started(event: OutputEvent) -> None:
        if "spinning" in event.text:
            cancel.set()

    code = "y = 1\nprint('spinning', flush=True)\n" + SPIN  # y is set before the cancel
    stopped = await session.run(code, cancel=cancel, on_output=started, keep_state=True)
    assert (stopped.outcome, stopped.restarted) == ("cancelled", False)
    after = await session.run("x + y")
    assert after.result == {"text/plain": "42"}


async def test_output_of_the_interrupted_run_stays_with_it(session: Session) -> None:
    code = (
        "print('before', flush=True)\n"
        "try:\n"
        "    while True:\n"
        "        pass\n"
        "finally:\n"
        "    print('cleanup')\n"
    )
    late = await session.run(code, limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", False)
    assert late.stdout == "before\ncleanup\n"
    after = await session.run("print('mine')")
    assert (after.stdout, after.stderr) == ("mine\n", "")


async def test_code_that_ignores_the_interrupt_is_restarted(session: Session) -> None:
    await session.run("x = 41")
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + SPIN
    late = await session.run(code, limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", True)
    assert "interpreter was restarted" in late.stderr
    after = await session.run("'x' in globals()")
    assert after.result == {"text/plain": "False"}
    assert after.restarted is True  # the next result says so, as after any restart


async def test_code_that_swallows_the_interrupt_is_restarted(session: Session) -> None:
    code = (
        "while True:\n"
        "    try:\n"
        "        while True:\n"
        "            pass\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
    )
    late = await session.run(code, limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", True)
    assert (await session.run("6 * 7")).result == {"text/plain": "42"}


async def test_a_handler_the_code_installed_does_not_outlive_its_run(session: Session) -> None:
    # The next run arms the interrupt again, whatever an earlier one did to the handler.
    await session.run("import signal\nsignal.signal(signal.SIGINT, lambda *_: None)\nx = 1")
    late = await session.run(SPIN, limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", False)
    assert (await session.run("x")).result == {"text/plain": "1"}


async def test_without_keep_state_a_deadline_still_restarts(session: Session) -> None:
    await session.run("x = 41")
    late = await session.run(SPIN, limits=SHORT)
    assert (late.outcome, late.restarted) == ("timeout", True)
    assert (await session.run("'x' in globals()")).result == {"text/plain": "False"}


async def test_an_interrupt_of_an_idle_interpreter_is_ignored(session: Session) -> None:
    await session.run("x = 41")
    holder = session._interpreter.holder  # the signal a late interrupt leaves behind
    await holder.interrupt_interpreter()
    await holder.interrupt_interpreter()
    after = await session.run("x + 1")
    assert (after.outcome, after.result) == ("ok", {"text/plain": "42"})


async def test_a_child_process_holding_the_interpreter_gets_it_restarted(session: Session) -> None:
    # os.system ignores SIGINT while it waits for its child, as C's system() does.
    late = await session.run("import os\nos.system('sleep 60')", limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", True)
    assert (await session.run("6 * 7")).result == {"text/plain": "42"}


async def test_a_bad_answer_after_the_interrupt_gets_it_restarted(session: Session) -> None:
    # The report after an interrupt is checked like any other: garbage on the protocol fd.
    await session.run("x = 41")
    code = (
        "import os\ntry:\n    while True:\n        pass\nfinally:\n    os.write(3, b'\\xff' * 64)\n"
    )
    late = await session.run(code, limits=SHORT, keep_state=True)
    assert (late.outcome, late.restarted) == ("timeout", True)
    after = await session.run("'x' in globals()")
    assert after.result == {"text/plain": "False"}


async def test_interrupts_nobody_waits_on_leave_no_answer_behind(session: Session) -> None:
    for _ in range(3):  # without keep_state, a deadline interrupts through the run's signaller
        late = await session.run(SPIN, limits=SHORT)
        assert (late.outcome, late.restarted) == ("timeout", True)
    holder = session._interpreter.holder
    await holder.interrupt_interpreter()  # one a caller waits on, answered and forgotten
    assert (await session.run("6 * 7")).result == {"text/plain": "42"}
    assert isinstance(holder, Holder)
    assert holder._answered == set()
