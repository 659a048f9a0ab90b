"""CPU per fresh isolated run, checkouts side by side: what a change costs every run.

Run as ``.venv/bin/python bench/cpu_per_run.py [--checkout PATH ...] [--pairs N] [--runs N]``.
Each round measures every checkout in turn (their ``src`` on ``PYTHONPATH``, this venv's
interpreter and packages), so drift in the machine's speed hits all of them alike: an engine
at capacity 2 with a pool of 4, 16 clients running ``print(6*7)`` until ``--runs`` runs are
done, and the CPU the engine process, its zygotes and their workers used meanwhile, per run.
Without ``--checkout`` it measures this checkout alone. On a virtual machine whose CPUs are
shared, absolute numbers move with the host's load; read the ratios between checkouts of one
round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import machine_summary, render_table

_MEASURE = r"""
import json, os, sys, time
import anyio
sys.path.insert(0, sys.argv[2])
from _common import children, proc_cpu_ms
from corral.engine import Engine

RUNS = int(sys.argv[1])
CODE = "print(6*7)"
CLIENTS = 16
WARM_RUNS = 30

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
    engine_ms, zygote_ms, workers_ms = ((b - a) / RUNS for a, b in zip(before, after))
    print(json.dumps({"rate": RUNS / seconds, "engine": engine_ms, "zygote": zygote_ms,
                      "workers": workers_ms}))

anyio.run(main)
"""


def measure(checkout: Path, runs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(runs), here],
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
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    checkouts = args.checkout or [Path(__file__).resolve().parent.parent]
    rows, totals = [], {str(c): [] for c in checkouts}
    for round_number in range(1, args.pairs + 1):
        for checkout in checkouts:
            got = measure(checkout, args.runs)
            totals[str(checkout)].append(got["total"])
            rows.append([
                str(round_number), str(checkout), f"{got['rate']:.0f}", f"{got['engine']:.2f}",
                f"{got['zygote']:.2f}", f"{got['workers']:.2f}", f"{got['total']:.2f}",
            ])  # fmt: skip
    headers = ["round", "checkout", "runs/s", "engine", "zygote", "workers", "CPU ms/run"]
    print(machine_summary())
    print(render_table(headers, rows, markdown=args.markdown))
    first = statistics.mean(totals[str(checkouts[0])])
    for checkout in checkouts:
        mean = statistics.mean(totals[str(checkout)])
        print(f"{checkout}: mean {mean:.2f} ms/run, {mean / first - 1:+.1%} against the first")


if __name__ == "__main__":
    main()
