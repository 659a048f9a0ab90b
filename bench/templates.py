"""Templates side by side with the default runtime, in one engine (issue 21).

Run as root: ``.venv/bin/python bench/templates.py [--runs N] [--markdown]``. It builds two
templates from the tests' wheel (``code-interpreter-v1`` and ``base``), then measures:

* a fresh run from a warm template against the same run from the default runtime, run after
  run in turn (``import numpy`` on the full runtimes, ``pass`` on the lean ones): the
  template's cost per create (the issue's bound: 1 ms over the default);
* a session opened from a template (its files copied in) against a default one;
* a template's first use: its zygote's start and first run (bound: 1.5 s);
* the layer's disk: its size once, and that every sandbox sees the same file (one inode).

Numbers are wall-clock medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)
sys.path.append(str(ROOT / "bench"))

import anyio  # noqa: E402
from _common import machine_summary, render_table  # noqa: E402
from tests.network.internet import build_wheel  # noqa: E402

from corral._limits import Limits  # noqa: E402
from corral.engine import BuildLog, Engine, PackageSources, build_template  # noqa: E402
from corral.templates import CopyFile, Pip, TemplateSpec, TemplateStore  # noqa: E402

_FIRST_USES = 3  # cold starts of each template (each closes its zygote first)
_FULL = "import numpy"
_LEAN = "pass"
_INODE = (
    "import os; os.stat('/opt/corral/template/site-packages/corral_test_pkg/__init__.py').st_ino"
)


@dataclass
class Found:
    build_s: float = 0.0
    run_ms: dict[str, float] | None = None
    session_ms: dict[str, float] | None = None
    first_use_ms: dict[str, float] | None = None
    layer_bytes: int = 0
    inodes: list[str] | None = None
    host_inode: int = 0


async def _ms(work: object) -> float:
    started = time.perf_counter()
    await work  # type: ignore[misc]
    return (time.perf_counter() - started) * 1000


async def _run_ms(engine: Engine, code: str, template: str = "") -> float:
    started = time.perf_counter()
    result = await engine.run(code, template=template)
    assert result.outcome == "ok", result.error
    return (time.perf_counter() - started) * 1000


async def measure(runs: int, folder: Path) -> Found:
    wheels = folder / "wheels"
    wheels.mkdir(mode=0o755)
    wheels.chmod(0o755)
    build_wheel(wheels).chmod(0o644)
    store = TemplateStore(folder / "data")
    found = Found()
    async with Engine(
        capacity=2, limits=Limits(timeout=120), pool_size=2,
        packages=PackageSources(index_url="", wheelhouse=str(wheels)), templates=store,
    ) as engine:  # fmt: skip
        steps = (Pip(("corral_test_pkg",)), CopyFile("data/readme.txt", b"x" * 4096))
        started = time.perf_counter()
        for name, base in (("full", "code-interpreter-v1"), ("lean", "base")):
            spec = TemplateSpec(base=base, steps=steps)
            await build_template(engine, store, name, spec, owner="", log=BuildLog())
        found.build_s = (time.perf_counter() - started) / 2

        first: dict[str, list[float]] = {"full": [], "lean": []}
        for _ in range(_FIRST_USES):
            for name, code in (("full", _FULL), ("lean", _LEAN)):
                await engine.templates.aclose()  # no template zygote is up
                first[name].append(await _run_ms(engine, code, name))
        found.first_use_ms = {k: statistics.median(v) for k, v in first.items()}

        samples: dict[str, list[float]] = {k: [] for k in ("full", "lean", "full-t", "lean-t")}
        for _ in range(5):  # warm-up: every pool filled, every path taken once
            await _run_ms(engine, _FULL, "full")
            await _run_ms(engine, _LEAN, "lean")
        for _ in range(runs):
            samples["full"].append(await _run_ms(engine, _FULL))
            samples["full-t"].append(await _run_ms(engine, _FULL, "full"))
            samples["lean"].append(await _run_ms(engine, _LEAN))
            samples["lean-t"].append(await _run_ms(engine, _LEAN, "lean"))
        found.run_ms = {k: statistics.median(v) for k, v in samples.items()}

        opened: dict[str, list[float]] = {"default": [], "template": []}
        for _ in range(max(3, runs // 5)):
            for label, template in (("default", ""), ("template", "full")):
                started = time.perf_counter()
                session = await engine.open_session(template=template)
                opened[label].append((time.perf_counter() - started) * 1000)
                await session.close()
        found.session_ms = {k: statistics.median(v) for k, v in opened.items()}

        layer = store.get("full").layer
        found.layer_bytes = sum(
            p.stat().st_size for p in layer.rglob("*") if p.is_file() and not p.is_symlink()
        )
        found.host_inode = os.stat(layer / "site-packages/corral_test_pkg/__init__.py").st_ino
        inodes = [await engine.run(_INODE, template="full") for _ in range(3)]
        found.inodes = [
            str(r.result.get("text/plain")) if isinstance(r.result, dict) else "" for r in inodes
        ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-templates-") as folder:
        found = anyio.run(measure, args.runs, Path(folder))
    run, first, opened = found.run_ms or {}, found.first_use_ms or {}, found.session_ms or {}
    over_full = run["full-t"] - run["full"]
    over_lean = run["lean-t"] - run["lean"]
    same_inode = set(found.inodes or []) == {str(found.host_inode)}
    rows = [
        [f"fresh run `{_FULL}`, default runtime", f"{run['full']:.2f} ms", ""],
        [f"fresh run `{_FULL}`, warm template (code-interpreter-v1)", f"{run['full-t']:.2f} ms",
         f"{over_full:+.2f} ms (bound: +1 ms)"],
        [f"fresh run `{_LEAN}`, default (lean) runtime", f"{run['lean']:.2f} ms", ""],
        [f"fresh run `{_LEAN}`, warm template (base)", f"{run['lean-t']:.2f} ms",
         f"{over_lean:+.2f} ms (bound: +1 ms)"],
        ["session open, default", f"{opened['default']:.1f} ms", ""],
        ["session open, template (its files copied in)", f"{opened['template']:.1f} ms",
         f"{opened['template'] - opened['default']:+.1f} ms"],
        ["first use, code-interpreter-v1 template (zygote start + run)",
         f"{first['full']:.0f} ms", "bound: 1500 ms"],
        ["first use, base template", f"{first['lean']:.0f} ms", "bound: 1500 ms"],
        ["build (pip from the wheelhouse + a file)", f"{found.build_s:.1f} s", ""],
        ["layer on disk, once", f"{found.layer_bytes} bytes",
         "one inode in every sandbox" if same_inode else "NOT one inode"],
    ]  # fmt: skip
    print(machine_summary())
    print(render_table(["what", "median", "against"], rows, markdown=args.markdown))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(found), indent=2))
    met = max(over_full, over_lean) <= 1.0 and max(first.values()) <= 1500 and same_inode
    print("targets met" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
