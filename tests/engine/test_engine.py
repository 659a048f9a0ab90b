"""The Engine: result shape, queueing and cancellation on the sandbox's in-process twin;
evidence, resource use, random state, killed workers and zygotes with real workers."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import numpy
import pytest

import corral
from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, Input, RunEvent
from corral.errors import EngineClosed
from corral.sandbox import Zygote
from tests.engine.twinkit import StandIn, standing_in, twin_engine

pytestmark = pytest.mark.anyio

LIMITS = Limits(timeout=10)
HOLD = "import time\ntime.sleep(60)"
"""Code that occupies a worker until the test cancels it or its deadline passes (on the twin a
stand-in that waits)."""


class Recorder:
    """An on_event sink that keeps every phase and can wake a test on one."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self._events: dict[str, anyio.Event] = {}

    def __call__(self, event: RunEvent) -> None:
        self.phases.append(event.phase)
        self.reached(event.phase).set()

    def reached(self, phase: str) -> anyio.Event:
        return self._events.setdefault(phase, anyio.Event())

    async def wait(self, phase: str, seconds: float = 10) -> None:
        with anyio.fail_after(seconds):
            await self.reached(phase).wait()


@pytest.fixture
async def small_engine() -> AsyncIterator[Engine]:
    """Capacity 1, one queue place, on the twin."""
    handler = standing_in({HOLD: StandIn()})
    async with twin_engine(
        handler, capacity=1, queue_size=1, pool_size=1, limits=LIMITS
    ) as started:
        yield started


async def _run_into(
    engine: Engine,
    results: dict[str, ExecutionResult],
    name: str,
    code: str,
    **options: Any,
) -> None:
    results[name] = await engine.run(code, **options)


def _hold_as(name: str) -> str:
    """Code that names its process ``name``, prints, then sleeps until stopped."""
    return f"open('/proc/self/comm', 'w').write({name!r})\nprint('alive', flush=True)\n" + HOLD


def _named_and_sleeping(pid: int, name: str) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as comm, open(f"/proc/{pid}/stat") as stat:
            return comm.read().strip() == name and stat.read().rsplit(")", 1)[1].split()[0] == "S"
    except FileNotFoundError:
        return False


async def _sleeping_worker(engine: Engine, name: str) -> int:
    """The host pid of this engine's worker called ``name`` once it sleeps in user code."""
    with anyio.fail_after(10):
        while True:
            for host in engine._zygote_handles().values():
                assert isinstance(host, Zygote)
                for pid in list(host._workers):
                    if _named_and_sleeping(pid, name):
                        return pid
            await anyio.sleep(0.01)  # a condition poll: nothing signals "in user code"


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


async def _zygote_replaced(engine: Engine, old: object) -> None:
    with anyio.fail_after(30):
        # The supervisor swaps in a new zygote and the pool refills; nothing signals it.
        while engine._zygote is old or engine.statistics().pool_ready == 0:  # noqa: ASYNC110
            await anyio.sleep(0.05)


# result shape and evidence ------------------------------------------------------------------


async def test_result_shape_and_dial_fields(engine: Engine) -> None:
    ok = await engine.run("print('hi')\n6 * 7", limits=LIMITS)
    failed = await engine.run("raise ValueError('no')", limits=LIMITS)
    assert (ok.outcome, ok.status, ok.ok) == ("ok", "SUCCESS", True)
    assert (failed.outcome, failed.status, failed.ok) == ("python_error", "FAILURE", False)
    assert ok.as_dial() == {
        "status": "SUCCESS",
        "stdout": "hi\n",
        "stderr": "",
        "result": {"text/plain": "42"},
        "display": [],
    }
    assert list(ok.as_dial()) == ["status", "stdout", "stderr", "result", "display"]
    assert list(failed.as_dial()) == ["status", "stdout", "stderr", "result", "display"]
    assert failed.as_dial()["result"] == ""
    full = ok.as_dict()
    design_fields = [
        "status", "outcome", "stdout", "stderr", "result", "display", "files", "omitted",
        "error", "elapsed_ms", "queued_ms", "evidence",
    ]  # fmt: skip
    assert set(design_fields) <= set(full)
    assert json.loads(json.dumps(full)) == full
    assert full["omitted"] == {"stdout": 0, "stderr": 0, "result": 0}
    assert full["error"] is None
    assert failed.as_dict()["error"]["type"] == "ValueError"
    assert ok.elapsed_ms > 0
    assert 0 <= ok.queued_ms <= ok.elapsed_ms


async def test_evidence_records_code_runtime_inputs_and_limits(real_engine: Engine) -> None:
    code = "print(open(input_files['notes']).read())  # é"
    notes = Input(id="notes", text=b"hello", original=b"\x00raw")
    limits = Limits(timeout=7, output_chars=5000)
    result = await real_engine.run(code, inputs=[notes], limits=limits)
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "hello\n"
    evidence = result.evidence
    assert evidence is not None
    assert evidence.code_sha256 == hashlib.sha256(code.encode()).hexdigest()
    runtime = evidence.runtime.lower()
    assert f"python {platform.python_version()}" in runtime
    assert f"numpy {numpy.__version__}" in runtime
    assert f"corral {corral.__version__}" in runtime
    assert dict(evidence.limits) == limits.as_dict()
    assert [(i.id, i.sha256, i.original_sha256) for i in evidence.inputs] == [
        ("notes", hashlib.sha256(b"hello").hexdigest(), hashlib.sha256(b"\x00raw").hexdigest())
    ]


async def test_results_carry_resource_use(real_engine: Engine) -> None:
    result = await real_engine.run(
        "data = bytearray(64 * 1024 * 1024)\ntotal = sum(range(3_000_000))", limits=LIMITS
    )
    assert result.outcome == "ok", result.stderr
    assert result.cpu_ms is not None
    assert result.cpu_ms > 0
    assert result.peak_rss_kb is not None
    assert result.peak_rss_kb >= 64 * 1024


async def test_invalid_input_never_reaches_a_worker(engine: Engine) -> None:
    for code, limits in (
        ("x = 1\n" * 100, Limits(timeout=5, code_chars=50)),
        ("print('a')\x00", LIMITS),
    ):
        recorder = Recorder()
        result = await engine.run(code, limits=limits, on_event=recorder)
        assert result.outcome == "invalid_input"
        assert result.message
        assert "started" not in recorder.phases
        assert "executing" not in recorder.phases


async def test_events_carry_metadata_only(engine: Engine) -> None:
    recorder = Recorder()
    seen: list[RunEvent] = []

    def sink(event: RunEvent) -> None:
        recorder(event)
        seen.append(event)

    result = await engine.run("print('secret-output')\n'secret-result'", on_event=sink)
    assert result.outcome == "ok"
    assert recorder.phases == ["started", "executing", "finished"]
    finished = seen[-1]
    assert (finished.outcome, finished.stdout_chars) == ("ok", len("secret-output\n"))
    assert "secret" not in repr(seen)


# random state -------------------------------------------------------------------------------


async def test_random_state_differs_between_runs(real_engine: Engine) -> None:
    code = "import json, random, numpy\nprint(json.dumps([random.random(), numpy.random.rand()]))"
    draws = []
    for _ in range(4):
        result = await real_engine.run(code, limits=LIMITS)
        assert result.outcome == "ok", result.stderr
        draws.append(json.loads(result.stdout))
    assert len({d[0] for d in draws}) == len(draws)
    assert len({d[1] for d in draws}) == len(draws)


# deadlines and cancellation -----------------------------------------------------------------


async def test_cancelling_a_running_run_kills_it(real_engine: Engine) -> None:
    recorder = Recorder()
    cancel = anyio.Event()
    results: dict[str, ExecutionResult] = {}
    name = f"cancel-{secrets.token_hex(4)}"
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _run_into(
                real_engine, results, "run", _hold_as(name), limits=LIMITS, on_event=recorder,
                cancel=cancel,
            )
        )  # fmt: skip
        pid = await _sleeping_worker(real_engine, name)
        cancelled_at = time.perf_counter()
        cancel.set()
        await recorder.wait("finished")
        assert time.perf_counter() - cancelled_at < 2
    result = results["run"]
    assert result.outcome == "cancelled"
    assert result.status == "FAILURE"
    assert result.stdout == "alive\n"  # output before the kill is kept
    with anyio.fail_after(5):
        while _alive(pid):  # noqa: ASYNC110 - killed, then reaped by the zygote: no event
            await anyio.sleep(0.01)


async def test_cancelled_queued_run_never_starts(small_engine: Engine) -> None:
    engine = small_engine
    holder, queued = Recorder(), Recorder()
    stop_holder, cancel = anyio.Event(), anyio.Event()
    results: dict[str, ExecutionResult] = {}
    limits = Limits(timeout=20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _run_into(
                engine, results, "holder", HOLD, limits=limits, on_event=holder,
                cancel=stop_holder,
            )
        )  # fmt: skip
        await holder.wait("executing")
        submitted = time.perf_counter()
        tg.start_soon(
            lambda: _run_into(
                engine, results, "queued", "print('ran')", limits=limits, on_event=queued,
                cancel=cancel,
            )
        )  # fmt: skip
        await queued.wait("queued")
        assert engine.statistics().queued == 1
        # Let it wait a measurable while, then cancel it while the holder still runs.
        with anyio.move_on_after(0.3):
            await queued.reached("started").wait()
        cancel.set()
        await queued.wait("finished")
        waited_ms = (time.perf_counter() - submitted) * 1000
        assert engine.statistics().queued == 0
        assert engine.statistics().running == 1
        stop_holder.set()
        await holder.wait("finished")
    result = results["queued"]
    assert result.outcome == "cancelled"
    assert result.stdout == ""
    assert "started" not in queued.phases
    assert "executing" not in queued.phases
    assert results["holder"].outcome == "cancelled"
    # The slot is free again and nothing resurrected the cancelled run.
    after = await engine.run("print('next')", limits=LIMITS)
    assert (after.outcome, after.stdout) == ("ok", "next\n")
    assert engine.statistics().runs_by_outcome.get("cancelled") == 2
    # All of its life was spent in the queue.
    assert result.queued_ms >= 0.9 * min(waited_ms, 300)


async def test_deadline_covers_time_spent_queued(small_engine: Engine) -> None:
    engine = small_engine
    holder, queued = Recorder(), Recorder()
    stop_holder = anyio.Event()
    results: dict[str, ExecutionResult] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _run_into(
                engine, results, "holder", HOLD, limits=Limits(timeout=20),
                on_event=holder, cancel=stop_holder,
            )
        )  # fmt: skip
        await holder.wait("executing")
        started = time.perf_counter()
        await _run_into(engine, results, "queued", "print('late')", limits=Limits(timeout=0.5),
                        on_event=queued)  # fmt: skip
        elapsed = time.perf_counter() - started
        stop_holder.set()
    result = results["queued"]
    assert result.outcome == "timeout"
    assert 0.5 <= elapsed < 0.5 + 2
    assert "started" not in queued.phases
    assert result.queued_ms >= 450


async def test_third_concurrent_run_is_busy(small_engine: Engine) -> None:
    engine = small_engine
    holder, queued = Recorder(), Recorder()
    stop = anyio.Event()
    results: dict[str, ExecutionResult] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _run_into(engine, results, "first", HOLD, on_event=holder, cancel=stop)
        )
        await holder.wait("executing")
        tg.start_soon(lambda: _run_into(engine, results, "second", "print(2)", on_event=queued))
        await queued.wait("queued")
        started = time.perf_counter()
        third = await engine.run("print(3)", limits=LIMITS)
        assert time.perf_counter() - started < 1  # refused at once, not queued
        stop.set()
    assert third.outcome == "busy"
    assert third.status == "FAILURE"
    assert third.message
    assert results["first"].outcome == "cancelled"
    assert (results["second"].outcome, results["second"].stdout) == ("ok", "2\n")
    assert engine.statistics().scheduler.rejected_busy == 1


# crashes ------------------------------------------------------------------------------------


async def test_sigkill_of_a_running_worker_gives_worker_error(real_engine: Engine) -> None:
    recorder = Recorder()
    results: dict[str, ExecutionResult] = {}
    name = f"victim-{secrets.token_hex(4)}"
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _run_into(
                real_engine, results, "victim", _hold_as(name), limits=LIMITS, on_event=recorder
            )
        )
        host_pid = await _sleeping_worker(real_engine, name)
        pidfd = os.pidfd_open(host_pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # as the OOM killer would
        finally:
            os.close(pidfd)
        await recorder.wait("finished")
    result = results["victim"]
    assert result.outcome == "worker_error", (result.outcome, result.message)
    assert result.status == "FAILURE"
    assert result.message
    assert str(host_pid) not in result.message  # a tenant learns nothing of the host's pids
    assert result.stdout == "alive\n"
    after = await real_engine.run("print('next')", limits=LIMITS)
    assert (after.outcome, after.stdout) == ("ok", "next\n")


@pytest.mark.isolation
async def test_killing_the_zygote_is_recovered_from() -> None:
    # One zygote, so that the runs in flight are certainly its workers.
    async with Engine(capacity=2, limits=LIMITS, lean=False) as engine:
        host = engine._zygote
        assert host is not None
        recorders = [Recorder(), Recorder()]
        results: dict[str, ExecutionResult] = {}

        def in_flight(name: str, recorder: Recorder) -> Callable[[], Any]:
            return lambda: _run_into(engine, results, name, HOLD, on_event=recorder)

        async with anyio.create_task_group() as tg:
            for i, recorder in enumerate(recorders):
                tg.start_soon(in_flight(f"run{i}", recorder))
            for recorder in recorders:
                await recorder.wait("executing")
            killed_at = time.perf_counter()
            host.kill()
            for recorder in recorders:
                await recorder.wait("finished", seconds=5)
        assert time.perf_counter() - killed_at < 5
        for name in ("run0", "run1"):
            assert results[name].outcome == "worker_error", (name, results[name].message)
        # The supervisor starts a new zygote; later runs succeed.
        await _zygote_replaced(engine, host)
        assert engine.statistics().zygote_restarts == 1
        after = await engine.run("print('recovered')", limits=LIMITS)
        assert (after.outcome, after.stdout) == ("ok", "recovered\n")


@pytest.mark.isolation
async def test_a_run_during_a_zygote_restart_does_not_hang() -> None:
    async with Engine(capacity=1, pool_size=1, limits=LIMITS, lean=False) as engine:
        host = engine._zygote
        assert host is not None
        host.kill()
        with anyio.fail_after(15):
            result = await engine.run("print('either way')", limits=LIMITS)
        assert result.outcome in ("ok", "worker_error"), result.message
        await _zygote_replaced(engine, host)
        after = await engine.run("print('recovered')", limits=LIMITS)
        assert after.outcome == "ok", after.message


# lifecycle ----------------------------------------------------------------------------------


async def test_a_closed_engine_refuses_work() -> None:
    engine = twin_engine(capacity=1)
    with pytest.raises(EngineClosed):
        await engine.run("print(1)")
    async with engine:
        assert (await engine.run("print(1)", limits=LIMITS)).outcome == "ok"
    with pytest.raises(EngineClosed):
        await engine.run("print(1)")
    await engine.aclose()  # idempotent
