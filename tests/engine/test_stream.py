"""Output streamed while a run executes: live, within the ceilings, and never changing the result.

Liveness is proved by events, not by time: the code waits for something the test does only
after it received the first chunk (a cancel, or a file put into the session), so a run whose
output arrived only at the end could not finish the way these tests expect. Those run in real
workers (what a worker prints must reach us while it runs), as does the comparison of results
with and without a listener (it needs the worker's display()); the engine's side (ceilings, a
failing listener, the stream's end) runs on the sandbox's in-process twin.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, OutputEvent, RunEvent
from corral.engine._fit import STREAM_CUT, marker
from tests.engine.twinkit import StandIn, standing_in, twin_engine

pytestmark = pytest.mark.anyio

LIMITS = Limits(timeout=10)
TICKING = "import time\nprint('tick')\nwhile True:\n    time.sleep(0.01)"
"""Prints once, then runs until stopped; on the twin a stand-in that prints, then waits."""


def _comparable(result: ExecutionResult) -> ExecutionResult:
    return dataclasses.replace(result, elapsed_ms=0, queued_ms=0, cpu_ms=None, peak_rss_kb=None)


def _text(events: list[OutputEvent], kind: str) -> str:
    return "".join(e.text for e in events if e.kind == kind)


async def test_a_plain_print_arrives_while_the_run_still_runs(real_engine: Engine) -> None:
    # The run can only end "cancelled" if the first line reached us while it was running:
    # it never ends by itself before its deadline.
    cancel = anyio.Event()
    events: list[OutputEvent] = []

    def listener(event: OutputEvent) -> None:
        events.append(event)
        cancel.set()

    code = "import time\nprint('first')\nwhile True:\n    time.sleep(0.01)"
    with anyio.fail_after(20):
        result = await real_engine.run(code, limits=LIMITS, cancel=cancel, on_output=listener)
    assert result.outcome == "cancelled", result.message
    assert events[0] == OutputEvent(kind="stdout", text="first\n")
    assert result.stdout == "first\n"


async def test_session_stream_yields_output_before_the_run_ends(real_engine: Engine) -> None:
    session = await real_engine.open_session(limits=LIMITS)
    try:
        code = (
            "import os, time, sys\n"
            "print('first')\n"
            "print('warning', file=sys.stderr)\n"
            "while not os.path.exists('go'):\n"
            "    time.sleep(0.01)\n"
            "print('second')\n"
            "6 * 7"
        )
        items: list[OutputEvent | ExecutionResult] = []
        with anyio.fail_after(20):
            async for item in session.stream(code):
                items.append(item)
                if isinstance(item, OutputEvent) and item.text == "first\n":
                    await session.put_file("go", b"")
        result = items[-1]
        assert isinstance(result, ExecutionResult)
        assert result.outcome == "ok", result.message
        events = [i for i in items[:-1] if isinstance(i, OutputEvent)]
        assert len(events) == len(items) - 1
        assert _text(events, "stdout") == "first\nsecond\n" == result.stdout
        assert _text(events, "stderr") == "warning\n" == result.stderr
        assert result.result == {"text/plain": "42"}
    finally:
        await session.close()


async def test_streamed_output_obeys_the_ceilings(engine: Engine) -> None:
    limits = LIMITS.replace(output_chars=1000, output_bytes=1500)
    events: list[OutputEvent] = []
    code = "print('a' * 200_000)\nimport sys\nprint('é' * 5000, file=sys.stderr)"
    result = await engine.run(code, limits=limits, on_output=events.append)
    assert result.outcome == "ok", result.message
    stdout, stderr = _text(events, "stdout"), _text(events, "stderr")
    # The head the result keeps too, then where streaming stopped (outside the budget).
    assert stdout == "a" * 1000 + STREAM_CUT
    assert stderr.endswith(STREAM_CUT)
    stderr = stderr.removesuffix(STREAM_CUT)
    assert len(stderr) <= 1000
    assert len(stdout.encode()) - len(STREAM_CUT) + len(stderr.encode()) <= 1500
    # Omissions stay exact: every character not kept is counted.
    omitted = result.omitted["stdout"]
    assert len(result.stdout) - len(marker(omitted)) + omitted == 200_001
    plain = await engine.run(code, limits=limits)
    assert _comparable(plain) == _comparable(result)


async def test_results_are_identical_with_and_without_a_listener(real_engine: Engine) -> None:
    code = (
        "import sys\n"
        "for i in range(50):\n"
        "    print(i, 'x' * i)\n"
        "print('err', file=sys.stderr)\n"
        "display({'text/plain': 'shown'}, raw=True)\n"
        "open('out.txt', 'w').write('data')\n"
        "{'k': list(range(10))}"
    )
    events: list[OutputEvent] = []
    streamed = await real_engine.run(code, limits=LIMITS, on_output=events.append)
    plain = await real_engine.run(code, limits=LIMITS)
    assert streamed.outcome == "ok", streamed.message
    assert _comparable(streamed) == _comparable(plain)
    assert _text(events, "stdout") == plain.stdout
    assert [e.data for e in events if e.kind == "display"] == list(plain.display)


async def test_engine_stream_ends_with_the_result(engine: Engine) -> None:
    items = [item async for item in engine.stream("print('hi')\n1 + 1", limits=LIMITS)]
    assert items[:-1] == [OutputEvent(kind="stdout", text="hi\n")]
    result = items[-1]
    assert isinstance(result, ExecutionResult)
    assert (result.outcome, result.result) == ("ok", {"text/plain": "2"})


async def test_leaving_the_stream_early_cancels_the_run() -> None:
    ended = anyio.Event()
    outcomes: list[str | None] = []

    def on_event(event: RunEvent) -> None:
        if event.phase == "finished":
            outcomes.append(event.outcome)
            ended.set()

    engine = twin_engine(standing_in({TICKING: StandIn("tick\n")}), limits=LIMITS)
    with anyio.fail_after(20):
        async with engine:
            stream = engine.stream(TICKING, limits=LIMITS, on_event=on_event)
            async for item in stream:
                assert item == OutputEvent(kind="stdout", text="tick\n")
                break
            await stream.aclose()
            await ended.wait()
    assert outcomes == ["cancelled"]


async def test_a_failing_listener_does_not_change_the_result(engine: Engine) -> None:
    def broken(event: OutputEvent) -> None:
        raise RuntimeError("listener bug")

    result = await engine.run("print('still fine')", limits=LIMITS, on_output=broken)
    assert (result.outcome, result.stdout) == ("ok", "still fine\n")
