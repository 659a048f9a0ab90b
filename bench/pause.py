"""Pause, resume and snapshots of sessions, side by side with what a user does without them
(issue 22).

Run as root: ``.venv/bin/python bench/pause.py [--runs N] [--megabytes N] [--markdown]``.
One engine with a data folder; a session holds ``--megabytes`` (default 200) in a variable:

* a full pause in a running server (its cgroup frozen) and its resume, against the same
  pause kept on disk (files and globals written out, processes ended) and its resume, and a
  filesystem pause; the bound: 1 s each;
* a resume after a restart: the engine pauses everything at shutdown, the next engine on the
  same folder runs the session's next cell (bound: 3 s), against a fresh session's first cell;
* a new session from a warm snapshot (the zygote up, the snapshot in the page cache) running
  its first cell, against a new empty session's first cell (bound: 100 ms).

Numbers are wall-clock medians in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)
sys.path.append(str(ROOT / "bench"))

import anyio  # noqa: E402
from _common import machine_summary, render_table  # noqa: E402

from corral._limits import Limits  # noqa: E402
from corral.engine import Engine, Session  # noqa: E402

_MIB = 1 << 20
_LIMITS = Limits(timeout=60, memory_bytes=2048 * _MIB)
_HOLD = "data = bytes(range(256)) * ({mb} * 4096)\nx = 41\ndef f(): return x + 1"
_SMALL = "import math\nx = 41\ndef f(): return x + 1\nopen('notes.txt', 'w').write('n' * 1000)"


async def _ms(action: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await action()
    return (time.perf_counter() - started) * 1000


def _engine(folder: Path, megabytes: int) -> Engine:
    disk = (2 * megabytes + 64) * _MIB
    return Engine(capacity=2, limits=_LIMITS, paused_dir=folder, session_disk_bytes=disk)


async def _holding(engine: Engine, megabytes: int) -> Session:
    session = await engine.open_session()
    result = await session.run(_HOLD.format(mb=megabytes))
    assert result.outcome == "ok", result
    return session


async def _in_server(engine: Engine, runs: int, megabytes: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    session = await _holding(engine, megabytes)
    try:
        for mode, to_disk in (("full", False), ("full", True), ("filesystem", True)):
            name = {False: "frozen", True: "on disk"}[to_disk] + f" ({mode})"
            pauses, resumes = (
                found.setdefault(f"pause, {name}", []),
                found.setdefault(f"resume, {name}", []),
            )
            for _ in range(runs):
                pauses.append(await _ms(lambda m=mode, d=to_disk: session.pause(m, to_disk=d)))
                resumes.append(await _ms(session.resume))
                if mode == "filesystem":  # its globals are gone: hold the bytes again
                    await session.run(_HOLD.format(mb=megabytes))
            check = await session.run("len(data) // (1 << 20)")
            assert check.outcome == "ok", check
        baseline = found.setdefault("close and open a new session (no pause)", [])
        for _ in range(runs):

            async def reopen() -> None:
                fresh = await engine.open_session()
                await fresh.run("1")
                await fresh.close()

            baseline.append(await _ms(reopen))
    finally:
        await session.close()
    return found


async def _restart(folder: Path, runs: int, megabytes: int) -> dict[str, list[float]]:
    resumed, fresh = [], []
    for _ in range(runs):
        async with _engine(folder, megabytes) as first:
            session = await _holding(first, megabytes)
            kept = await first.paused.pause_all(60.0)
            assert kept == {session.id: "full"}, kept
        async with _engine(folder, megabytes) as second:
            again = second.get_session(session.id)
            resumed.append(await _ms(lambda s=again: s.run("f(), len(data)")))
            await again.close()

            async def first_cell(engine: Engine = second) -> None:
                new = await engine.open_session()
                await new.run("1")
                await new.close()

            fresh.append(await _ms(first_cell))
    return {"resume after a restart, first cell": resumed, "a fresh session's first cell": fresh}


async def _snapshots(engine: Engine, runs: int) -> dict[str, list[float]]:
    source = await engine.open_session()
    await source.run(_SMALL)
    meta = await source.snapshot("full")
    warm = await engine.open_session(snapshot=meta.id)  # the page cache and the zygote warm
    await warm.close()
    cases: dict[str, list[float]] = {}
    for _ in range(runs):
        for name, snapshot in (("from a warm snapshot", meta.id), ("empty", None)):

            async def opened(snapshot: str | None = snapshot) -> Session:
                return await engine.open_session(snapshot=snapshot)

            started = time.perf_counter()
            new = await opened()
            ready = time.perf_counter()
            result = await new.run("f()" if snapshot else "1")
            done = time.perf_counter()
            assert result.outcome == "ok", result
            cases.setdefault(f"new session {name}: opened", []).append((ready - started) * 1000)
            cases.setdefault(f"new session {name}: first cell", []).append((done - started) * 1000)
            await new.close()
    await source.close()
    return cases


async def main(runs: int, megabytes: int, markdown: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="corral-pause-bench-") as tmp:
        folder = Path(tmp)
        results: dict[str, list[float]] = {}
        async with _engine(folder / "live", megabytes) as engine:
            results |= await _in_server(engine, runs, megabytes)
            results |= await _snapshots(engine, runs)
        results |= await _restart(folder / "restart", max(1, runs // 2), megabytes)
    rows = [[name, f"{statistics.median(values):.1f}", str(len(values))]
            for name, values in results.items()]  # fmt: skip
    print(f"# {machine_summary()}; a session holding {megabytes} MB")
    print(render_table(["case", "median ms", "runs"], rows, markdown=markdown))
    print(json.dumps({k: statistics.median(v) for k, v in results.items()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    anyio.run(main, args.runs, args.megabytes, args.markdown)
