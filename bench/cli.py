"""``corral run`` as a shell user meets it: the whole command's wall time, side by side with
the interpreter's own start (issue 10: stdlib-only code in at most 0.4 s on this machine).

Cases run interleaved (order rotated each round) so load drift hits them alike:

* ``corral run -c 'print(6*7)'``: CLI start, engine start (one lean zygote, its first
  worker), the run, the shutdown;
* ``corral run -c 'import json; ...'``: the same with a standard-library import;
* ``python3 -c 'print(6*7)'`` and ``python3 -I -S -c ...``: no isolation, the baseline.

Usage: ``.venv/bin/python bench/cli.py [--rounds N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Samples, fmt, machine_summary, render_table

CORRAL = str(Path(sys.executable).with_name("corral"))
TARGET_SECONDS = 0.4
CASES: dict[str, list[str]] = {
    "corral run -c 'print(6*7)'": [CORRAL, "run", "-c", "print(6*7)"],
    "corral run -c 'import json; ...'": [CORRAL, "run", "-c", "import json; print(json.dumps(42))"],
    "python3 -c 'print(6*7)'": ["python3", "-c", "print(6*7)"],
    "python3 -I -S -c 'print(6*7)'": ["python3", "-I", "-S", "-c", "print(6*7)"],
}


def _once(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or done.stdout.strip() != "42":
        raise SystemExit(f"{argv}: wrong answer {done.stdout!r} {done.stderr[-500:]!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    samples = {name: Samples(name) for name in CASES}
    names = list(CASES)
    for argv in CASES.values():
        _once(argv)  # page cache and bytecode warm, as for a user's second command
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            samples[name].add(_once(CASES[name]))
    base = samples["python3 -c 'print(6*7)'"].p50
    rows = [
        [name, fmt(s.p50), fmt(s.percentile(0.9)), f"{s.p50 / base:.2f}x"]
        for name, s in samples.items()
    ]
    print(machine_summary())
    print(render_table(["command", "p50 ms", "p90 ms", "p50 / python3 -c"], rows, markdown=True))
    corral_p50 = samples[names[0]].p50 / 1000
    met = "yes" if corral_p50 <= TARGET_SECONDS else "no"
    print(f"\ntarget: stdlib-only corral run <= {TARGET_SECONDS} s: {corral_p50:.3f} s, met: {met}")
    if args.json:
        Path(args.json).write_text(json.dumps({n: s.values for n, s in samples.items()}, indent=2))


if __name__ == "__main__":
    main()
