"""RL-reward benchmark (issue 12): verl-style test cases per second, side by side.

Run as ``.venv/bin/python bench/rl.py [--problems P] [--concurrency C] [--capacity K]
[--markdown]``. Every case is what verl sends for a function-call problem: its harness (star
imports of 17 standard-library modules, the solution, JSON arguments read from stdin) with one
test case on stdin, compared with the expected stdout as verl compares. The same cases go
through, in one run on this machine:

* ``POST /run_code``, one request per case, ``--concurrency`` clients (verl's thread pool is at
  least 32), against a server process (this script with ``--serve``) on 127.0.0.1 (a
  problem's first case runs fresh, its repeats fork from a case server kept for it);
* ``POST /run_code_batch``, one request per problem (50 cases each), same client concurrency
  (each case forks from a case server that compiled the problem's code once); a round sends
  it ``--concurrency`` problems of its own, so that as many requests are in flight as on the
  other paths (a round's ``--problems`` would keep only that many batches going);
* ``corral batch`` on a JSONL file of every case (its rate after engine start-up; repeats of
  a problem fork from kept case servers too);
* ``python3 -I -c`` per case at the same concurrency: no isolation, the floor any
  process-per-case sandbox pays.

Each row has cases/s, its ratio to the subprocess floor, p50/p99 latency (per request: one case,
or one batch of 50) and the error mix (anything but a passing case). Loopback only.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is a sibling: keep this folder from shadowing the standard library's ``http``.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import secrets  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import AsyncIterator, Awaitable, Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import httpx  # noqa: E402
from _common import (  # noqa: E402
    Samples,
    children,
    fmt,
    machine_summary,
    proc_cpu_ms,
    render_table,
)

CASES_PER_PROBLEM = 50
HARNESS_MODULES = (
    *("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random"),
    *("statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins"),
    "typing",
)


def harness(solution: str, fn_name: str) -> str:
    """verl's function-call harness, in shape: star imports, the solution, stdin arguments."""
    stars = "\n".join(f"from {m} import *" for m in HARNESS_MODULES)
    plain = "\n".join(f"import {m}" for m in HARNESS_MODULES if m not in ("builtins", "typing"))
    return f"""{stars}
{plain}
import traceback

{solution}

def _call():
    raw = sys.stdin.read()
    try:
        args = [json.loads(line) for line in raw.split('\\n')] if raw.strip() else []
    except ValueError as exc:
        sys.stderr.write(f'bad JSON arguments: {{exc}}\\n')
        return None, True
    try:
        target = globals().get({fn_name!r}) or getattr(globals()['Solution'](), {fn_name!r})
        return target(*args), False
    except Exception:
        sys.stderr.write(traceback.format_exc())
        return None, True

if __name__ == '__main__':
    value, failed = _call()
    if not failed:
        if isinstance(value, (dict, list, tuple, bool)) or value is None:
            print(json.dumps(value))
        else:
            print(str(value))
"""


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    cases: list[tuple[str, str]]  # (stdin, expected stdout)


def problems(count: int) -> list[Problem]:
    made = []
    for p in range(count):
        solution = (
            "class Solution:\n"
            "    def solve(self, nums: List[int], k: int) -> int:\n"
            f"        return sum(sorted(nums)[-k:]) + {p}\n"
        )
        cases = []
        for c in range(CASES_PER_PROBLEM):
            nums = [(c * 7 + i * 13) % 101 for i in range(20)]
            k = 1 + c % 5
            cases.append((f"{json.dumps(nums)}\n{k}", f"{sum(sorted(nums)[-k:]) + p}\n"))
        made.append(Problem(harness(solution, "solve"), cases))
    return made


def verl_body(code: str, stdin: str) -> dict[str, Any]:
    return {
        "compile_timeout": 10,
        "run_timeout": 10,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": 1024,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }


@dataclass(slots=True)
class Row:
    name: str
    cases: int = 0
    seconds: float = 0.0
    cpu_ms: float = 0.0
    """CPU of everything the path ran (server, zygotes, workers, or the subprocesses)."""
    latency: Samples = field(default_factory=lambda: Samples("latency"))
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.cases / self.seconds if self.seconds else float("nan")

    @property
    def cpu_per_case(self) -> float:
        return self.cpu_ms / self.cases if self.cases else float("nan")

    def add(self, other: Row) -> None:
        self.cases += other.cases
        self.seconds += other.seconds
        self.cpu_ms += other.cpu_ms
        self.latency.values.extend(other.latency.values)
        self.errors.update(other.errors)


def tree_cpu_ms(pid: int) -> float:
    """CPU of ``pid``, its reaped descendants and its live ones."""
    own, waited = proc_cpu_ms(pid)
    return own + waited + sum(tree_cpu_ms(child) for child in children(pid))


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def _verdict(body: dict[str, Any], expected: str) -> str:
    run = body.get("run_result") or {}
    if body.get("status") != "Success":
        return f"{body.get('status')}:{run.get('status')}"
    if str(run.get("stdout", "")).rstrip("\n") != expected.rstrip("\n"):
        return "wrong answer"
    return "passed"


async def _gather(jobs: list[Callable[[], Awaitable[None]]], concurrency: int) -> float:
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with limiter:
            await job()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for job in jobs:
            tg.start_soon(one, job)
    return time.perf_counter() - started


async def bench_run_code(
    url: str, pid: int, work: list[Problem], concurrency: int, name: str
) -> Row:
    row = Row(name)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        def job(code: str, stdin: str, expected: str) -> Callable[[], Awaitable[None]]:
            async def go() -> None:
                started = time.perf_counter()
                response = await client.post("/run_code", json=verl_body(code, stdin))
                row.latency.add((time.perf_counter() - started) * 1000)
                verdict = (
                    _verdict(response.json(), expected)
                    if response.status_code == 200
                    else f"HTTP {response.status_code}"
                )
                if verdict != "passed":
                    row.errors[verdict] += 1

            return go

        jobs = [job(p.code, stdin, exp) for p in work for stdin, exp in p.cases]
        warm = [job(work[0].code, *work[0].cases[0]) for _ in range(8)]
        await _gather(warm, concurrency)
        row.latency.values.clear()
        row.errors.clear()
        cpu = tree_cpu_ms(pid)
        row.seconds = await _gather(jobs, concurrency)
        row.cpu_ms = tree_cpu_ms(pid) - cpu
        row.cases = len(jobs)
    return row


async def bench_batch_route(url: str, pid: int, work: list[Problem], concurrency: int) -> Row:
    row = Row(f"/run_code_batch ({CASES_PER_PROBLEM} cases per request)")
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:

        def job(problem: Problem) -> Callable[[], Awaitable[None]]:
            async def go() -> None:
                body = {
                    "code": problem.code,
                    "cases": [{"stdin": s, "expected_stdout": e} for s, e in problem.cases],
                }
                started = time.perf_counter()
                response = await client.post("/run_code_batch", json=body)
                row.latency.add((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    row.errors[f"HTTP {response.status_code}"] += len(problem.cases)
                    return
                for result in response.json()["results"]:
                    if not result["passed"]:
                        row.errors[_verdict(result, "?")] += 1

            return go

        cpu = tree_cpu_ms(pid)
        row.seconds = await _gather([job(p) for p in work], concurrency)
        row.cpu_ms = tree_cpu_ms(pid) - cpu
        row.cases = sum(len(p.cases) for p in work)
    return row


def bench_corral_batch(work: list[Problem], capacity: int, folder: Path) -> Row:
    row = Row("corral batch (after start-up)")
    corral = str(Path(sys.executable).with_name("corral"))
    source, one, target = folder / "in.jsonl", folder / "one.jsonl", folder / "out.jsonl"
    expected: dict[str, str] = {}
    with source.open("w") as out:
        for p, problem in enumerate(work):
            for c, (stdin, exp) in enumerate(problem.cases):
                ident = f"{p}-{c}"
                expected[ident] = exp
                out.write(json.dumps({"id": ident, "code": problem.code, "stdin": stdin}) + "\n")
    first = json.dumps({"id": "x", "code": work[0].code, "stdin": work[0].cases[0][0]})
    one.write_text(first + "\n")
    argv = [corral, "batch", "--concurrency", str(capacity), "-o", str(target)]

    def timed(path: Path) -> tuple[float, float]:
        started, cpu = time.perf_counter(), children_cpu_ms()
        subprocess.run([*argv, str(path)], check=True, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started, children_cpu_ms() - cpu

    start_up, start_up_cpu = timed(one)
    total, total_cpu = timed(source)
    for line in target.read_text().splitlines():
        record = json.loads(line)
        row.latency.add(record["elapsed_ms"])
        if record["outcome"] != "ok":
            row.errors[record["outcome"]] += 1
        elif record["stdout"].rstrip("\n") != expected[record["id"]].rstrip("\n"):
            row.errors["wrong answer"] += 1
    row.cases = len(expected)
    row.seconds = max(total - start_up, 1e-9)
    row.cpu_ms = max(total_cpu - start_up_cpu, 0.0)
    return row


async def bench_subprocess(work: list[Problem], concurrency: int) -> Row:
    row = Row("python3 -I -c per case (no isolation)")

    def job(code: str, stdin: str, expected: str) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            started = time.perf_counter()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-c",
                code,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, _ = await process.communicate(stdin.encode())
            row.latency.add((time.perf_counter() - started) * 1000)
            if process.returncode != 0:
                row.errors[f"exit {process.returncode}"] += 1
            elif out.decode().rstrip("\n") != expected.rstrip("\n"):
                row.errors["wrong answer"] += 1

        return go

    jobs = [job(p.code, s, e) for p in work for s, e in p.cases]
    cpu = children_cpu_ms()
    row.seconds = await _gather(jobs, concurrency)
    row.cpu_ms = children_cpu_ms() - cpu
    row.cases = len(jobs)
    return row


# the server ------------------------------------------------------------------------------


def serve(port_file: Path, capacity: int) -> None:
    """The benchmark's server: one engine, gateway mode, /run_code open (``--serve``)."""
    import uvicorn

    from corral._config import ApiKey, Config
    from corral.engine import Engine
    from corral.http import create_app
    from corral.http._server import engine_options

    data = Path(tempfile.mkdtemp(prefix="corral-bench-rl-", dir=port_file.parent))
    config = Config(
        data_dir=data,
        api_keys=(ApiKey(key=secrets.token_urlsafe(), user="bench"),),
        capacity=capacity,
        queue_size=1024,
        open_run_code=True,
        log_level="WARNING",
    )
    options = engine_options(config)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)

    async def main() -> None:
        async with Engine(**options) as engine:
            app = create_app(engine, config)
            server = uvicorn.Server(
                uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
            )
            await anyio.Path(port_file).write_text(str(listener.getsockname()[1]))
            await server.serve(sockets=[listener])

    anyio.run(main)


@contextlib.asynccontextmanager
async def server(folder: Path, capacity: int) -> AsyncIterator[tuple[str, int]]:
    """A ``--serve`` process; yields its URL and pid."""
    port_file = folder / f"port-{secrets.token_hex(4)}"
    argv = [sys.executable, __file__, "--serve", str(port_file), "--capacity", str(capacity)]
    process = await anyio.open_process(argv)
    port = anyio.Path(port_file)
    async with process:
        try:
            with anyio.fail_after(120):
                while not await port.exists() or not await port.read_text():  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            yield f"http://127.0.0.1:{await port.read_text()}", process.pid
        finally:
            process.terminate()
            with anyio.fail_after(30):
                await process.wait()


async def run(args: argparse.Namespace) -> list[Row]:
    """Every path on every round's share of the problems, interleaved, so that a machine
    whose load changes during the run (other work on a shared box) weighs on all alike."""
    c, k = args.concurrency, args.capacity
    # A request of the batch route carries a problem's 50 cases: it takes ``c`` problems a
    # round to keep ``c`` requests in flight, as the other paths' single cases do.
    batched = max(args.problems, c)
    work = problems((args.problems + batched) * args.rounds)
    names = [
        "/run_code",
        f"/run_code_batch ({CASES_PER_PROBLEM} cases per request)",
        "corral batch (after start-up)",
        "python3 -I -c per case (no isolation)",
    ]
    totals = [Row(name) for name in names]
    with tempfile.TemporaryDirectory(prefix="corral-bench-rl-", dir=Path.cwd()) as tmp:
        folder = Path(tmp)
        async with server(folder, k) as plain:
            for round_ in range(args.rounds):
                first = round_ * (args.problems + batched)
                share = work[first : first + args.problems]
                batches = work[first + args.problems : first + args.problems + batched]
                rows = [
                    await bench_run_code(*plain, share, c, names[0]),
                    await bench_batch_route(*plain, batches, c),
                    bench_corral_batch(share, k, folder),
                    await bench_subprocess(share, c),
                ]
                for total, row in zip(totals, rows, strict=True):
                    total.add(row)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--problems", type=int, default=4, help=f"per round, {CASES_PER_PROBLEM} cases each"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--concurrency", type=int, default=32, help="client concurrency")
    parser.add_argument("--capacity", type=int, default=os.cpu_count() or 1, help="workers")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.capacity)
        return
    rows = anyio.run(run, args)
    floor = rows[-1].rate
    floor_cpu = rows[-1].cpu_per_case
    table = [
        [
            row.name,
            fmt(row.rate, 0),
            fmt(row.rate / floor, 1) + "x",
            fmt(row.cpu_per_case, 1),
            fmt(floor_cpu / row.cpu_per_case, 1) + "x",
            fmt(row.latency.p50, 1),
            fmt(row.latency.percentile(0.99), 1),
            ", ".join(f"{k} {v}" for k, v in sorted(row.errors.items())) or "none",
        ]
        for row in rows
    ]
    headers = [
        "path",
        "cases/s",
        "vs subprocess",
        "CPU ms/case",
        "vs subprocess (CPU)",
        "p50 ms",
        "p99 ms",
        "errors",
    ]
    print(f"{rows[0].cases} cases per path ({rows[1].cases} on the batch route), client "
          f"concurrency {args.concurrency}, capacity {args.capacity}; "
          f"{machine_summary()}")  # fmt: skip
    print(render_table(headers, table, markdown=args.markdown))


if __name__ == "__main__":
    main()
