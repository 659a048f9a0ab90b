"""``corral run`` as a shell user meets it: the whole command's wall time, side by side with
the interpreter's own start (issue 10: stdlib-only code in at most 0.4 s on this machine).

Cases run interleaved (order rotated each round) so load drift hits them alike:

* ``corral run -c 'print(6*7)'``: CLI start, engine start (one zygote without preloads, the
  start-up probe's worker), the run, the shutdown;
* ``corral run -c 'import json; ...'``: the same with a standard-library import;
* ``corral run -c '6*7'``: a trailing expression, whose value IPython's formatter renders
  (that zygote imports IPython on first use);
* ``python -I -c 'print(6*7)'`` and ``python -I -S -c ...``: the same interpreter corral runs
  on (``sys.executable``, not a ``python3`` shim on PATH), no isolation: the baseline;
* with ``--before SRC`` (repeatable): the first case again with another checkout's ``src``
  first on the path (``git archive COMMIT src | tar -x -C DIR``), for before/after pairs in
  one sitting.

CPU is what the command and every descendant it reaped used (``RUSAGE_CHILDREN``): the CLI,
the zygote and, through it, the workers.

Usage: ``.venv/bin/python bench/cli.py [--rounds N] [--before SRC] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Samples, fmt, machine_summary, render_table

CORRAL = str(Path(sys.executable).with_name("corral"))
PYTHON = sys.executable
TARGET_SECONDS = 0.4
PRINT = "corral run -c 'print(6*7)'"
BASELINE = "python -I -c 'print(6*7)'"
CASES: dict[str, list[str]] = {
    PRINT: [CORRAL, "run", "-c", "print(6*7)"],
    "corral run -c 'import json; ...'": [CORRAL, "run", "-c", "import json; print(json.dumps(42))"],
    "corral run -c '6*7'": [CORRAL, "run", "-c", "6*7"],
    BASELINE: [PYTHON, "-I", "-c", "print(6*7)"],
    "python -I -S -c 'print(6*7)'": [PYTHON, "-I", "-S", "-c", "print(6*7)"],
}


def _once(argv: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """(wall ms, CPU ms of the command and the descendants it reaped)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, env=env)
    elapsed = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or done.stdout.strip() != "42":
        raise SystemExit(f"{argv}: wrong answer {done.stdout!r} {done.stderr[-500:]!r}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--before", metavar="SRC", action="append", default=[], help="another checkout's src"
    )
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    cases = {name: (argv, None) for name, argv in CASES.items()}
    for src in args.before:
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        cases[f"{PRINT}, before ({src})"] = (CASES[PRINT], env)
    wall = {name: Samples(name) for name in cases}
    cpu = {name: Samples(name) for name in cases}
    names = list(cases)
    for argv, env in cases.values():
        _once(argv, env)  # page cache warm, as for a user's second command
    loads = [os.getloadavg()[0]]
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            ms, cpu_ms = _once(*cases[name])
            wall[name].add(ms)
            cpu[name].add(cpu_ms)
        loads.append(os.getloadavg()[0])
    base = wall[BASELINE].p50
    rows = [
        [name, fmt(s.p50), fmt(s.percentile(0.9)), f"{s.p50 / base:.1f}x", fmt(cpu[name].p50)]
        for name, s in wall.items()
    ]
    print(machine_summary())
    print(f"load average (1 min) during the run: {min(loads):.2f}-{max(loads):.2f}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("PYTHONDONTWRITEBYTECODE is set: an editable install compiles corral each start")
    headers = ["command", "p50 ms", "p90 ms", f"p50 / {BASELINE}", "CPU ms p50"]
    print(render_table(headers, rows, markdown=True))
    corral_p50 = wall[PRINT].p50 / 1000
    met = "yes" if corral_p50 <= TARGET_SECONDS else "no"
    print(f"\ntarget: stdlib-only corral run <= {TARGET_SECONDS} s: {corral_p50:.3f} s, met: {met}")
    if args.json:
        samples = {n: {"wall_ms": wall[n].values, "cpu_ms": cpu[n].values} for n in cases}
        Path(args.json).write_text(json.dumps(samples, indent=2))


if __name__ == "__main__":
    main()
