"""The one run path: fast logic tests on an in-process target (real workers: test_session.py)."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Evidence, ExecutionResult, Input
from corral.engine._job import Job
from corral.engine._runs import RunOptions, Runs, stop_message
from corral.engine._scheduler import Scheduler

pytestmark = pytest.mark.anyio

ENGINE = Path(__file__).resolve().parents[2] / "src" / "corral" / "engine"


class Hanging:
    """A target whose code never finishes; it records what the run path asked of it."""

    holds_slot = True

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.executing = anyio.Event()
        self.interrupted_while_held: list[bool] = []

    @contextlib.asynccontextmanager
    async def serial(self) -> AsyncIterator[object]:
        async with self.lock:
            yield self

    def closing(self) -> anyio.Event | None:
        return None

    async def execute(
        self, job: Job, code: str, inputs: Sequence[Input], evidence: Evidence
    ) -> ExecutionResult:
        self.executing.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def interrupted(self, job: Job) -> None:
        await anyio.lowlevel.checkpoint()  # a real target waits here for the code to stop
        self.interrupted_while_held.append(self.lock.locked())

    def stopped(self, job: Job, evidence: Evidence) -> ExecutionResult:
        return job.stopped(*stop_message(job), evidence)


def _runs() -> Runs:
    runs = Runs(Scheduler(2, 4))
    runs.open = True
    return runs


async def _run(runs: Runs, target: Hanging, cancel: anyio.Event | None = None) -> ExecutionResult:
    limits = Limits(timeout=60)
    return await runs.run(target, "x", RunOptions(limits=limits, cancel=cancel))


async def test_a_cancelled_run_cleans_its_target_up_while_still_holding_it() -> None:
    runs, target = _runs(), Hanging()
    cancel = anyio.Event()
    result: list[ExecutionResult] = []

    async def run() -> None:
        result.append(await _run(runs, target, cancel))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(5):
            await target.executing.wait()
        cancel.set()
    assert target.interrupted_while_held == [True]
    assert result[0].outcome == "cancelled"
    assert runs.outcomes["cancelled"] == 1


async def test_a_caller_leaving_gets_no_result_and_the_target_is_cleaned_up() -> None:
    runs, target = _runs(), Hanging()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run, runs, target)
        with anyio.fail_after(5):
            await target.executing.wait()
        tg.cancel_scope.cancel()
    assert target.interrupted_while_held == [True]
    assert runs.outcomes == {"cancelled": 1}


def test_sessions_know_the_run_path_not_the_engine() -> None:
    tree = ast.parse((ENGINE / "_session.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "corral.engine._runs" in imported
    assert "corral.engine._engine" not in imported
