"""RL-reward benchmark (issue 12): verl-style test cases per second, side by side.

Run as ``.venv/bin/python bench/rl.py [--problems P] [--concurrency C] [--capacity K]
[--markdown]``. Every case is what verl sends for a function-call problem: its harness (star
imports of 17 standard-library modules, the solution, JSON arguments read from stdin) with one
test case on stdin, compared with the expected stdout as verl compares. The same cases go
through, in one run on this machine:

* ``POST /run_code``, one request per case, ``--concurrency`` clients (verl's thread pool is at
  least 32), against a server process (this script with ``--serve``) on 127.0.0.1;
* the same with the lean zygote preloaded with the harness's modules (``--preload-harness``),
  to measure what import prewarming buys the same-code-many-cases workload;
* ``POST /run_code_batch``, one request per problem (50 cases each), same client concurrency;
* ``corral batch`` on a JSONL file of every case (its rate after engine start-up);
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
import json  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import httpx  # noqa: E402
from _common import Samples, fmt, machine_summary, render_table  # noqa: E402

CASES_PER_PROBLEM = 50
HARNESS_MODULES = (
    *("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random"),
    *("statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins"),
    "typing",
)
PRELOADABLE = tuple(m for m in HARNESS_MODULES if m not in ("builtins", "sys", "io"))


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
    latency: Samples = field(default_factory=lambda: Samples("latency"))
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.cases / self.seconds if self.seconds else float("nan")


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


async def bench_run_code(url: str, work: list[Problem], concurrency: int, name: str) -> Row:
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
        row.seconds = await _gather(jobs, concurrency)
        row.cases = len(jobs)
    return row


async def bench_batch_route(url: str, work: list[Problem], concurrency: int) -> Row:
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

        row.seconds = await _gather([job(p) for p in work], concurrency)
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

    def timed(path: Path) -> float:
        started = time.perf_counter()
        subprocess.run([*argv, str(path)], check=True, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started

    start_up = timed(one)
    total = timed(source)
    for line in target.read_text().splitlines():
        record = json.loads(line)
        row.latency.add(record["elapsed_ms"])
        if record["outcome"] != "ok":
            row.errors[record["outcome"]] += 1
        elif record["stdout"].rstrip("\n") != expected[record["id"]].rstrip("\n"):
            row.errors["wrong answer"] += 1
    row.cases = len(expected)
    row.seconds = max(total - start_up, 1e-9)
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
    row.seconds = await _gather(jobs, concurrency)
    row.cases = len(jobs)
    return row


# the server ------------------------------------------------------------------------------


def serve(port_file: Path, capacity: int, preload_harness: bool) -> None:
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
    if preload_harness:
        options["lean_preload"] = PRELOADABLE
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


async def with_server(
    folder: Path, capacity: int, preload: bool, body: Callable[[str], Awaitable[Row]]
) -> Row:
    port_file = folder / f"port-{secrets.token_hex(4)}"
    argv = [sys.executable, __file__, "--serve", str(port_file), "--capacity", str(capacity)]
    process = await anyio.open_process([*argv, *(["--preload-harness"] if preload else [])])
    port = anyio.Path(port_file)
    async with process:
        try:
            with anyio.fail_after(120):
                while not await port.exists() or not await port.read_text():  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            return await body(f"http://127.0.0.1:{await port.read_text()}")
        finally:
            process.terminate()
            with anyio.fail_after(30):
                await process.wait()


async def run(args: argparse.Namespace) -> list[Row]:
    work = problems(args.problems)
    c, k = args.concurrency, args.capacity
    with tempfile.TemporaryDirectory(prefix="corral-bench-rl-", dir=Path.cwd()) as tmp:
        folder = Path(tmp)
        return [
            await with_server(
                folder, k, False, lambda url: bench_run_code(url, work, c, "/run_code")
            ),
            await with_server(
                folder,
                k,
                True,
                lambda url: bench_run_code(url, work, c, "/run_code (harness preloaded)"),
            ),
            await with_server(folder, k, False, lambda url: bench_batch_route(url, work, c)),
            bench_corral_batch(work, k, folder),
            await bench_subprocess(work, c),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=8, help=f"{CASES_PER_PROBLEM} cases each")
    parser.add_argument("--concurrency", type=int, default=32, help="client concurrency")
    parser.add_argument("--capacity", type=int, default=os.cpu_count() or 1, help="workers")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--preload-harness", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.capacity, args.preload_harness)
        return
    rows = anyio.run(run, args)
    floor = rows[-1].rate
    table = [
        [
            row.name,
            fmt(row.rate, 0),
            fmt(row.rate / floor, 1) + "x",
            fmt(row.latency.p50, 1),
            fmt(row.latency.percentile(0.99), 1),
            ", ".join(f"{k} {v}" for k, v in sorted(row.errors.items())) or "none",
        ]
        for row in rows
    ]
    headers = ["path", "cases/s", "vs subprocess", "p50 ms", "p99 ms", "errors"]
    print(f"{rows[0].cases} cases, client concurrency {args.concurrency}, capacity "
          f"{args.capacity}; {machine_summary()}")  # fmt: skip
    print(render_table(headers, table, markdown=args.markdown))


if __name__ == "__main__":
    main()
