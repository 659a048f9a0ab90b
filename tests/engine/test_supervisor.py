"""Supervision: a failing background task is restarted with backoff and never takes the engine
down; a zygote that cannot come back leaves the engine up and says why. The engine's side of a
zygote or a spawn that fails runs on the sandbox's in-process twin, under trio's MockClock (the
supervisor's backoff takes no real time)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import pytest
from trio.testing import MockClock

from corral._config import Config
from corral._limits import Limits
from corral.engine._supervisor import Backoff, supervise
from corral.errors import IsolationError
from corral.http import create_app
from corral.sandbox._twin import InProcessZygote
from tests.engine.twinkit import twin_engine
from tests.http.httpkit import ALICE, KEYS, client_for

LIMITS = Limits(timeout=10)
_MOCK_CLOCK = pytest.mark.parametrize(
    "anyio_backend",
    [pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}))],
)


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}))]
)
@pytest.mark.anyio
async def test_a_failing_task_is_restarted_with_growing_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    starts: list[float] = []

    async def flaky() -> None:
        starts.append(anyio.current_time())
        if len(starts) <= 3:
            raise OSError(24, "Too many open files")

    with caplog.at_level(logging.ERROR, "corral.engine"):
        await supervise("the flaky task", flaky, Backoff(first=1.0, most=3.0))
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(starts)]
    assert gaps == [1.0, 2.0, 3.0]  # doubled, capped
    assert [r.message for r in caplog.records] == [
        f"the flaky task failed; restarting it in {d:.1f} s" for d in (1.0, 2.0, 3.0)
    ]


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}))]
)
@pytest.mark.anyio
async def test_cancellation_is_never_swallowed() -> None:
    async def forever() -> None:
        await anyio.sleep_forever()

    with anyio.move_on_after(5) as scope:
        await supervise("a task", forever)
    assert scope.cancelled_caught


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(60):
        while not condition():  # noqa: ASYNC110 - engine state changes signal nothing
            await anyio.sleep(0.05)


class _FailingStarts:
    """The twin zygote's ``start`` that fails ``failures`` times, then waits for ``release``."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.release = anyio.Event()
        self._real = InProcessZygote.start

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        outer = self

        async def start(zygote: InProcessZygote, task_group: anyio.abc.TaskGroup) -> None:
            outer.attempts += 1
            if outer.attempts <= outer.failures:
                raise IsolationError("injected: cannot build the sandbox")
            await outer.release.wait()
            await outer._real(zygote, task_group)

        monkeypatch.setattr(InProcessZygote, "start", start)


@_MOCK_CLOCK
@pytest.mark.anyio
async def test_a_zygote_restart_failure_keeps_the_engine_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    config = Config(mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, timeout=10)
    async with twin_engine(capacity=1, pool_size=1, limits=LIMITS, lean=False) as engine:
        app = create_app(engine, config)
        host = engine._zygote
        assert host is not None
        starts = _FailingStarts(failures=2)  # two failures: the retries go on after one
        starts.install(monkeypatch)
        host.kill()
        await _until(lambda: starts.attempts >= 2 and "injected" in engine.unavailable)

        assert engine.running
        result = await engine.run("print(1)")
        assert result.outcome == "worker_error"
        assert "injected: cannot build the sandbox" in result.message
        async with client_for(app, ALICE) as http:
            health = await http.get("/health")
            assert health.status_code == 503
            assert "injected: cannot build the sandbox" in health.json()["reason"]
            executed = await http.post("/v1/execute", json={"code": "print(1)"})
            assert executed.json()["outcome"] == "worker_error"
            opened = await http.post("/v1/ops/code_interpreter/open_session", json={})
            assert opened.status_code == 503  # the service is down, not the request wrong

        await _until(lambda: starts.attempts >= 3)  # the supervisor keeps trying
        starts.release.set()
        await _until(lambda: engine.unavailable == "" and engine.statistics().pool_ready > 0)
        after = await engine.run("print('back')")
        assert (after.outcome, after.stdout) == ("ok", "back\n")
        async with client_for(app, ALICE) as http:
            assert (await http.get("/health")).status_code == 200
        # Sessions (and with them the expiry loop's task group) survived too.
        session = await engine.open_session()
        assert (await session.run("x = 2\nx * 21")).result == {"text/plain": "42"}
        await session.close()
        assert engine.statistics().zygote_restarts == 3


@_MOCK_CLOCK
@pytest.mark.anyio
async def test_a_failing_pool_refill_does_not_cancel_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with twin_engine(capacity=1, pool_size=1, limits=LIMITS, lean=False) as engine:
        host = engine._zygote
        assert host is not None
        real_spawn = InProcessZygote.spawn
        failed = anyio.Event()

        async def spawn(self: InProcessZygote, **options: Any) -> Any:
            if not failed.is_set():
                failed.set()
                raise OSError(24, "Too many open files")
            return await real_spawn(self, **options)

        await _until(lambda: engine.statistics().pool_ready > 0)
        monkeypatch.setattr(InProcessZygote, "spawn", spawn)
        first = await engine.run("print(1)")  # takes the ready worker; the refill fails once
        assert first.outcome == "ok"
        with anyio.fail_after(30):
            await failed.wait()
        await _until(lambda: engine.statistics().pool_ready > 0)
        assert engine._zygote is host  # the zygote itself was never replaced
        second = await engine.run("print(2)")
        assert (second.outcome, second.stdout) == ("ok", "2\n")


@_MOCK_CLOCK
@pytest.mark.anyio
async def test_a_run_waiting_for_a_worker_fails_fast_when_none_can_be_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with twin_engine(capacity=1, pool_size=1, limits=LIMITS, lean=False) as engine:
        await _until(lambda: engine.statistics().pool_ready > 0)

        async def spawn(self: InProcessZygote, **options: Any) -> Any:
            raise OSError(24, "Too many open files")

        monkeypatch.setattr(InProcessZygote, "spawn", spawn)
        assert (await engine.run("print(1)")).outcome == "ok"  # the worker that was ready
        with anyio.fail_after(5):  # not the run's 10 s deadline
            starved = await engine.run("print(2)")
        assert starved.outcome == "worker_error"
        assert "Too many open files" in starved.message
        assert engine.running
