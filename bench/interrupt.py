"""A stopped session run: Jupyter's interrupt (``keep_state=True``) against DIAL's restart.

Side by side, in one session, alternating rounds: a run ``while True: pass`` whose deadline
(``--deadline`` seconds) stops it, then ``x + 1`` on the state the session had before. For
each mode: how long past its deadline the stopped run returns, and how long the next run
takes (a restarted interpreter pays the new interpreter's start there); the restart mode's
next run also shows the variable gone. Not part of corral; it talks to nothing.

Usage: ``.venv/bin/python bench/interrupt.py [--rounds N] [--deadline S] [--json PATH]
[--markdown]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import anyio
from _common import Samples, fmt, machine_summary, render_table

from corral._limits import Limits
from corral.engine import Engine

SPIN = "while True:\n    pass\n"


async def measure(rounds: int, deadline: float) -> dict[str, tuple[Samples, Samples]]:
    cases = {mode: (Samples(f"{mode}: past the deadline"), Samples(f"{mode}: next run"))
             for mode in ("interrupt", "restart")}  # fmt: skip
    async with Engine(capacity=2, limits=Limits(timeout=10)) as engine:
        session = await engine.open_session()
        try:
            for _ in range(rounds):
                for mode, (past, following) in cases.items():
                    keep = mode == "interrupt"
                    await session.run("x = 41")
                    started = time.perf_counter()
                    stopped = await session.run(
                        SPIN, limits=Limits(timeout=deadline), keep_state=keep
                    )
                    past.add((time.perf_counter() - started - deadline) * 1000)
                    started = time.perf_counter()
                    after = await session.run("x + 1")
                    following.add((time.perf_counter() - started) * 1000)
                    kept = after.result == {"text/plain": "42"}
                    if stopped.outcome != "timeout" or kept is not keep:
                        raise SystemExit(f"{mode}: unexpected {stopped.outcome}, kept={kept}")
        finally:
            await session.close()
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=0.2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    cases = anyio.run(measure, args.rounds, args.deadline)
    rows = [
        [mode, fmt(past.p50), fmt(past.percentile(0.9)), fmt(nxt.p50), fmt(nxt.percentile(0.9))]
        for mode, (past, nxt) in cases.items()
    ]
    headers = ["mode", "past deadline p50 ms", "p90", "next run p50 ms", "p90"]
    print(machine_summary())
    print(render_table(headers, rows, markdown=args.markdown))
    if args.json:
        samples = {s.name: s.values for pair in cases.values() for s in pair}
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "samples": samples}))  # fmt: skip


if __name__ == "__main__":
    main()
