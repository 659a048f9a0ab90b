"""What case servers buy (issue 12): one program's cases as ``Engine.run`` each, or as
``Engine.run_cases``, in process, side by side; and what the case server's run of a program's
leading imports buys (issue 19), against the same program behind a ``pass``, whose imports
each case then runs itself.

Run as ``.venv/bin/python bench/cases.py [--problems P] [--rounds R] [--markdown]``. Each
problem is ``bench/rl.py``'s verl harness with 50 cases on stdin; both paths get the same
problems, alternating by round, several problems at once (each path at capacity 2). Per path:
cases/s and CPU per case, split into the engine (this process) and the sandbox (zygotes,
workers, case servers and their children, from ``/proc``). Every answer is checked.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import anyio  # noqa: E402
from _common import children, fmt, machine_summary, proc_cpu_ms, render_table  # noqa: E402
from rl import CASES_PER_PROBLEM, Problem, problems  # noqa: E402

from corral._limits import Limits  # noqa: E402
from corral.engine import Case, Engine, ExecutionResult  # noqa: E402

LIMITS = Limits(timeout=10)
AT_ONCE = 8  # problems in flight at once, as several trainers' requests would be


@dataclass(slots=True)
class Tally:
    name: str
    cases: int = 0
    seconds: float = 0.0
    engine_ms: float = 0.0
    sandbox_ms: float = 0.0


def _tree_ms(pid: int) -> float:
    own, waited = proc_cpu_ms(pid)
    return own + waited + sum(_tree_ms(child) for child in children(pid))


def _own_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def _check(problem: Problem, results: list[ExecutionResult]) -> None:
    for result, (_stdin, expected) in zip(results, problem.cases, strict=True):
        if result.stdout.rstrip("\n") != expected.rstrip("\n"):
            raise SystemExit(f"wrong answer: {result.outcome} {result.stdout!r} {result.message}")


async def _per_run(engine: Engine, problem: Problem) -> None:
    results = [
        await engine.run(problem.code, stdin=stdin.encode(), limits=LIMITS)
        for stdin, _ in problem.cases
    ]
    _check(problem, results)


async def _batched(engine: Engine, problem: Problem) -> None:
    cases = [Case(stdin=stdin.encode()) for stdin, _ in problem.cases]
    _check(problem, await engine.run_cases(problem.code, cases, limits=LIMITS))


async def _batched_without_leading_imports(engine: Engine, problem: Problem) -> None:
    # A first statement that is not an import: the case server runs none of the imports.
    cases = [Case(stdin=stdin.encode()) for stdin, _ in problem.cases]
    _check(problem, await engine.run_cases("pass\n" + problem.code, cases, limits=LIMITS))


PATHS = (_per_run, _batched, _batched_without_leading_imports)


async def _measure(engine: Engine, tally: Tally, work: list[Problem], path: int) -> None:
    one = PATHS[path]
    limiter = anyio.CapacityLimiter(AT_ONCE)

    async def limited(problem: Problem) -> None:
        async with limiter:
            await one(engine, problem)

    pid = os.getpid()
    own, tree, started = _own_ms(), _tree_ms(pid), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for problem in work:
            tg.start_soon(limited, problem)
    tally.seconds += time.perf_counter() - started
    spent_own = _own_ms() - own
    tally.engine_ms += spent_own
    tally.sandbox_ms += _tree_ms(pid) - tree - spent_own
    tally.cases += len(work) * CASES_PER_PROBLEM


async def run(args: argparse.Namespace) -> list[Tally]:
    work = problems(args.problems * args.rounds + 1)
    tallies = [
        Tally("Engine.run per case"),
        Tally("Engine.run_cases (case servers)"),
        Tally("run_cases, each case runs the leading imports"),
    ]
    async with Engine(capacity=2, limits=LIMITS) as engine:
        for path in PATHS:  # warm every path once
            await path(engine, work[0])
        for round_ in range(args.rounds):
            share = work[1 + round_ * args.problems : 1 + (round_ + 1) * args.problems]
            order = range(len(PATHS)) if round_ % 2 == 0 else reversed(range(len(PATHS)))
            for which in order:
                await _measure(engine, tallies[which], share, which)
    return tallies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=4, help="per round and path")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    tallies = anyio.run(run, args)
    base = tallies[0]
    rows = []
    for tally in tallies:
        rate = tally.cases / tally.seconds
        total = (tally.engine_ms + tally.sandbox_ms) / tally.cases
        rows.append([
            tally.name,
            fmt(rate, 0),
            fmt(rate / (base.cases / base.seconds), 2) + "x",
            fmt(tally.engine_ms / tally.cases, 2),
            fmt(tally.sandbox_ms / tally.cases, 2),
            fmt(total, 2),
        ])  # fmt: skip
    print(f"{base.cases} cases per path, capacity 2; {machine_summary()}")
    headers = ["path", "cases/s", "vs run", "engine CPU ms/case", "sandbox CPU ms/case",
               "CPU ms/case"]  # fmt: skip
    print(render_table(headers, rows, markdown=args.markdown))


if __name__ == "__main__":
    main()
