"""CPU per fresh isolated run and pool-warm latency, checkouts side by side: what a change costs.

Run as ``.venv/bin/python bench/cpu_per_run.py [--checkout PATH ...] [--pairs N] [--runs N]
[--warm N] [--no-cgroups]``. Each round measures every checkout in turn (their ``src`` on
``PYTHONPATH``, this venv's interpreter and packages), so drift in the machine's speed hits all
of them alike: an engine at capacity 2 with a pool of 4, 16 clients running ``print(6*7)``
until ``--runs`` runs are done, and the CPU the engine process, its zygotes and their workers
used meanwhile, per run; then ``--warm`` runs one at a time, each once the pool is full again
and corral idle (``bench/engine.py``'s "pool warm"), and their p50 wall time. With
``--no-cgroups`` each checkout is measured a second time with the engine's cgroup tree not
made (every other wall in force): the cost of a cgroup per sandbox alone. Without
``--checkout`` it measures this checkout alone. On a virtual machine whose CPUs are shared,
absolute numbers move with the host's load; read the ratios between checkouts of one round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from _common import machine_summary, render_table

_MEASURE = r"""
import json, os, statistics, sys, time
import anyio
sys.path.insert(0, sys.argv[2])
from _common import children, proc_cpu_ms
from engine import wait_idle
from corral.engine import Engine

RUNS = int(sys.argv[1])
POOL_WARM_RUNS = int(sys.argv[3])
CODE = "print(6*7)"
CLIENTS = 16
WARM_RUNS = 30
if os.environ.get("CORRAL_BENCH_NO_CGROUPS") and hasattr(Engine, "_start_cgroups"):
    async def _no_cgroups(self):  # the tree is not made: runs go as on a host without cgroups
        self.cgroups_status = "not in force: bench/cpu_per_run.py --no-cgroups"
    Engine._start_cgroups = _no_cgroups

def cpu_ms():
    own = os.times()
    zygotes = [proc_cpu_ms(pid) for pid in children(os.getpid())]
    return ((own.user + own.system) * 1000.0, sum(z[0] for z in zygotes),
            sum(z[1] for z in zygotes))

async def main():
    async with Engine(capacity=2, pool_size=4) as engine:
        for _ in range(WARM_RUNS):
            await engine.run(CODE)
        left = RUNS
        before, started = cpu_ms(), time.perf_counter()

        async def client():
            nonlocal left
            while left > 0:
                left -= 1
                result = await engine.run(CODE)
                if result.stdout != "42\n":
                    raise SystemExit(f"a run failed: {result.outcome} {result.message}")

        async with anyio.create_task_group() as tg:
            for _ in range(CLIENTS):
                tg.start_soon(client)
        seconds = time.perf_counter() - started
        after = cpu_ms()
        walls = []
        for _ in range(POOL_WARM_RUNS):
            await wait_idle(engine)
            begun = time.perf_counter()
            result = await engine.run(CODE)
            walls.append((time.perf_counter() - begun) * 1000.0)
            if result.stdout != "42\n":
                raise SystemExit(f"a run failed: {result.outcome} {result.message}")
    engine_ms, zygote_ms, workers_ms = ((b - a) / RUNS for a, b in zip(before, after))
    print(json.dumps({"rate": RUNS / seconds, "engine": engine_ms, "zygote": zygote_ms,
                      "workers": workers_ms, "warm_p50": statistics.median(walls or [0.0])}))

anyio.run(main)
"""


@dataclass(frozen=True, slots=True)
class Variant:
    checkout: Path
    cgroups: bool = True

    def __str__(self) -> str:
        return str(self.checkout) if self.cgroups else f"{self.checkout} (no cgroups)"


def measure(variant: Variant, runs: int, warm: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(variant.checkout / "src")}
    env.pop("CORRAL_BENCH_NO_CGROUPS", None)
    if not variant.cgroups:
        env["CORRAL_BENCH_NO_CGROUPS"] = "1"
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(runs), here, str(warm)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["total"] = figures["engine"] + figures["zygote"] + figures["workers"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, action="append", help="repeatable")
    parser.add_argument("--pairs", type=int, default=3, help="rounds over every checkout")
    parser.add_argument("--runs", type=int, default=1500, help="runs per measurement")
    parser.add_argument("--warm", type=int, default=100, help="pool-warm runs per measurement")
    parser.add_argument(
        "--no-cgroups", action="store_true", help="each checkout also without its cgroup tree"
    )
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    checkouts = args.checkout or [Path(__file__).resolve().parent.parent]
    variants = [
        Variant(c, cgroups) for c in checkouts for cgroups in (True, False)[: 1 + args.no_cgroups]
    ]
    rows: list[list[str]] = []
    totals: dict[Variant, list[float]] = {v: [] for v in variants}
    warm: dict[Variant, list[float]] = {v: [] for v in variants}
    for round_number in range(1, args.pairs + 1):
        for variant in variants:
            got = measure(variant, args.runs, args.warm)
            totals[variant].append(got["total"])
            warm[variant].append(got["warm_p50"])
            rows.append([
                str(round_number), str(variant), f"{got['rate']:.0f}", f"{got['engine']:.2f}",
                f"{got['zygote']:.2f}", f"{got['workers']:.2f}", f"{got['total']:.2f}",
                f"{got['warm_p50']:.2f}",
            ])  # fmt: skip
    headers = [
        "round", "checkout", "runs/s", "engine", "zygote", "workers", "CPU ms/run",
        "pool-warm p50 ms",
    ]  # fmt: skip
    print(machine_summary())
    print(render_table(headers, rows, markdown=args.markdown))
    first = variants[0]
    for variant in variants:
        mean = statistics.mean(totals[variant])
        against = mean / statistics.mean(totals[first]) - 1
        ratios = [t / f - 1 for t, f in zip(totals[variant], totals[first], strict=True)]
        deltas = [w - f for w, f in zip(warm[variant], warm[first], strict=True)]
        print(
            f"{variant}: CPU mean {mean:.2f} ms/run, {against:+.1%}"
            f" against the first (median of the rounds' ratios {statistics.median(ratios):+.1%});"
            f" pool-warm p50 median {statistics.median(warm[variant]):.2f} ms"
            f" ({statistics.median(deltas):+.2f} ms, median of the rounds' differences)"
        )


if __name__ == "__main__":
    main()
