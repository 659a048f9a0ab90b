"""The sandbox's in-process twin under the real engine, under trio's MockClock: deadlines,
queueing and streaming take no real time. The engine side (reader, limits, scheduler) is
real; what runs "inside" is the real cell run in process, or a scripted handler. Real
isolation is tested elsewhere."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, OutputEvent, RunEvent
from corral.engine._fit import STREAM_CUT
from corral.sandbox import ErrorReport, Handler, InProcessBackend, RunRequest, TwinIO, TwinReply

pytestmark = pytest.mark.anyio

LIMITS = Limits(timeout=30)
# Real seconds the loop must be idle before virtual time jumps: session files are real file
# I/O in worker threads, and a jump while a thread still works would expire a run's deadline.
AUTOJUMP_AFTER = 0.01


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return "trio", {"clock": MockClock(autojump_threshold=AUTOJUMP_AFTER)}


async def _scripted(request: RunRequest, io: TwinIO) -> TwinReply:
    """``sleep N`` lines sleep (virtual seconds), other lines are printed; ends with a result."""
    for line in request.code.splitlines():
        if line.startswith("sleep "):
            await anyio.sleep(float(line.split()[1]))
        elif line.startswith("display "):
            await io.display({"text/plain": line[len("display ") :]})
        else:
            await io.stdout(line + "\n")
    return TwinReply(result={"text/plain": repr(len(request.code))})


@pytest.fixture
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    handler: Handler = getattr(request, "param", _scripted)
    twin = InProcessBackend(handler)
    async with Engine(capacity=1, pool_size=1, lean=False, limits=LIMITS, backend=twin) as started:
        yield started


async def test_the_real_cell_runs_in_process_on_the_protocol() -> None:
    twin = InProcessBackend()
    async with Engine(capacity=1, pool_size=1, lean=False, limits=LIMITS, backend=twin) as engine:
        result = await engine.run("print('hi')\n6 * 7")
        failed = await engine.run("1 / 0")
    assert (result.outcome, result.stdout, result.result) == ("ok", "hi\n", {"text/plain": "42"})
    assert failed.outcome == "python_error"
    assert failed.error is not None
    assert failed.error.type == "ZeroDivisionError"


async def test_a_run_past_its_deadline_times_out_in_virtual_time(engine: Engine) -> None:
    started = anyio.current_time()
    result = await engine.run("before\nsleep 1000\nafter", limits=LIMITS.replace(timeout=5))
    assert result.outcome == "timeout"
    assert result.stdout == "before\n"
    assert anyio.current_time() - started == pytest.approx(5, abs=0.5)


async def test_runs_wait_their_turn_in_order(engine: Engine) -> None:
    order: list[int] = []

    async def run(index: int, ready: anyio.Event | None) -> None:
        def on_event(event: RunEvent) -> None:
            if event.phase == "started":
                order.append(index)

        if ready is not None:
            ready.set()
        result = await engine.run(f"run {index}\nsleep 5", on_event=on_event)
        assert result.outcome == "ok"

    async with anyio.create_task_group() as tg:
        for index in range(4):
            queued = anyio.Event()
            tg.start_soon(run, index, queued)
            await queued.wait()
    assert order == [0, 1, 2, 3]


async def test_streamed_output_arrives_before_the_result(engine: Engine) -> None:
    seen: list[tuple[float, OutputEvent | ExecutionResult]] = []
    async for item in engine.stream("first\ndisplay chart\nsleep 1\nsecond"):
        seen.append((anyio.current_time(), item))
    kinds = [i.kind if isinstance(i, OutputEvent) else "result" for _, i in seen]
    # stdout (a pipe) and display (the protocol socket) are separate channels: unordered.
    assert sorted(kinds[:2]) == ["display", "stdout"]
    assert kinds[2:] == ["stdout", "result"]
    first_at, result_at = seen[0][0], seen[-1][0]
    assert result_at - first_at == pytest.approx(1, abs=0.1)  # virtual seconds
    result = seen[-1][1]
    assert isinstance(result, ExecutionResult)
    assert (result.stdout, result.display) == ("first\nsecond\n", ({"text/plain": "chart"},))


async def _flood(request: RunRequest, io: TwinIO) -> TwinReply:
    await io.stdout("x" * 100_000)
    for _ in range(100):
        await io.display({"text/plain": "y" * 10})
    return TwinReply(result={"text/plain": "z" * 100_000})


@pytest.mark.parametrize("engine", [_flood], indirect=True)
async def test_ceilings_hold_for_what_the_fake_sends(engine: Engine) -> None:
    limits = LIMITS.replace(output_chars=1000, max_display=3)
    events: list[OutputEvent] = []
    result = await engine.run("flood", limits=limits, on_output=events.append)
    assert result.outcome == "ok", result.message
    assert len(result.display) == 3
    streamed = "".join(e.text for e in events if e.kind == "stdout")
    assert streamed.endswith(STREAM_CUT)  # the listener is told where its stream stops
    assert len(streamed) - len(STREAM_CUT) == 1000
    assert result.omitted["result"] > 0
    assert len(result.result["text/plain"] if result.result else "") <= 1000


async def _stateful(request: RunRequest, io: TwinIO) -> TwinReply:
    """``set K V`` / ``get K`` on the interpreter's namespace, ``sleep N``, ``read PATH``."""
    verb, _, rest = request.code.partition(" ")
    if verb == "set":
        key, value = rest.split()
        io.namespace[key] = value
    elif verb == "sleep":
        await anyio.sleep(float(rest))
    elif verb == "read":
        assert io.cwd is not None
        text = await anyio.Path(io.cwd, rest).read_text()
        return TwinReply(result={"text/plain": text})
    elif rest not in io.namespace:
        return TwinReply(error=ErrorReport("NameError", rest, f"NameError: {rest}\n"))
    return TwinReply(result={"text/plain": str(io.namespace.get(rest, None))})


@pytest.mark.parametrize("engine", [_stateful], indirect=True)
async def test_a_session_keeps_state_and_loses_it_past_a_deadline(engine: Engine) -> None:
    session = await engine.open_session()
    try:
        await session.put_file("kept.txt", b"files stay")
        assert (await session.run("set x 41")).outcome == "ok"
        assert (await session.run("get x")).result == {"text/plain": "41"}
        started = anyio.current_time()
        hung = await session.run("sleep 1000", limits=LIMITS.replace(timeout=5))
        assert hung.outcome == "timeout"
        assert hung.restarted
        assert anyio.current_time() - started < 10  # virtual seconds: the deadline, a grace
        lost = await session.run("get x")
        assert lost.outcome == "python_error"
        assert (await session.run("read kept.txt")).result == {"text/plain": "files stay"}
    finally:
        await session.close()


async def test_the_display_is_wired_as_a_workers_and_put_back_after_the_cell() -> None:
    import builtins

    import matplotlib.pyplot as plt

    show = plt.show
    code = (
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\ndisplay('shown')\n"
        "from IPython.display import HTML, display as ipython_display\n"
        "ipython_display(HTML('<b>b</b>'))"
    )
    twin = InProcessBackend()
    async with Engine(capacity=1, pool_size=1, lean=False, limits=LIMITS, backend=twin) as engine:
        result = await engine.run(code)
    assert result.outcome == "ok", result.stderr
    figure, text, html = result.display
    assert figure["image/png"].startswith("iVBORw0KGgo")  # a PNG, as a worker renders it
    assert text == {"text/plain": "'shown'"}
    assert html["text/html"] == "<b>b</b>"
    assert not hasattr(builtins, "display")
    assert plt.show is show


async def test_the_cell_runs_under_the_interpreters_warning_filters() -> None:
    """Not the test process's, which turn warnings into errors: a worker prints them."""
    code = (
        "import warnings\nwarnings.warn('old', DeprecationWarning)\n"
        "warnings.warn('hidden', PendingDeprecationWarning)\nopen('f.txt', 'w').write('x')"
    )
    twin = InProcessBackend()
    async with Engine(capacity=1, pool_size=1, lean=False, limits=LIMITS, backend=twin) as engine:
        result = await engine.run(code)
    assert result.outcome == "ok", result.stderr
    assert "DeprecationWarning: old" in result.stderr
    assert "hidden" not in result.stderr


async def test_a_session_has_its_own_main_module_lent_to_each_cell() -> None:
    import sys

    ours = sys.modules["__main__"]
    code = "import sys\nmain = sys.modules['__main__']\nmain.__dict__.setdefault('runs', 0)"
    twin = InProcessBackend()
    async with Engine(capacity=1, pool_size=1, lean=False, limits=LIMITS, backend=twin) as engine:
        session = await engine.open_session()
        try:
            await session.run(code + "\nruns += 1")
            second = await session.run(code + "\nruns += 1\nruns, main is sys.modules[__name__]")
        finally:
            await session.close()
        other = await engine.run("import sys\n'runs' in vars(sys.modules['__main__'])")
    assert second.result == {"text/plain": "(2, True)"}
    assert other.result == {"text/plain": "False"}  # a one-shot worker has a __main__ of its own
    assert sys.modules["__main__"] is ours
    assert not hasattr(ours, "runs")


async def _crashes(request: RunRequest, io: TwinIO) -> TwinReply:
    """``crash`` prints, then dies mid-run; other code is ``set``/``get`` (``_stateful``)."""
    if request.code == "crash":
        await io.stdout("about to go\n")
        return TwinReply(crashed=True)
    return await _stateful(request, io)


@pytest.mark.parametrize("engine", [_crashes], indirect=True)
async def test_a_crashed_reply_is_a_worker_that_ends_mid_run(engine: Engine) -> None:
    crashed = await engine.run("crash")
    assert (crashed.outcome, crashed.stdout) == ("worker_error", "about to go\n")
    assert "exited before it answered" in crashed.message
    assert (await engine.run("set y 1")).outcome == "ok"  # the next run has a worker
    session = await engine.open_session()
    try:
        assert (await session.run("set x 41")).outcome == "ok"
        lost = await session.run("crash")
        assert (lost.outcome, lost.restarted) == ("worker_error", True)
        after = await session.run("get x")  # a fresh interpreter: the namespace is gone
        assert after.outcome == "python_error"
    finally:
        await session.close()
