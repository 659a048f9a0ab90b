"""Which zygote serves a run: stdlib-only code gets a lean worker, anything else the full one."""

from __future__ import annotations

from typing import Any

import pytest

from corral._limits import Limits
from corral.engine import Engine, Input
from corral.engine._supply import stdlib_only
from tests.engine.twinkit import twin_engine

LIMITS = Limits(timeout=10)


@pytest.mark.parametrize(
    ("code", "lean"),
    [
        ("print(6 * 7)", True),
        ("import json, os.path\nfrom collections import Counter", True),
        ("import numpy as np", False),
        ("from pandas import DataFrame", False),
        ("import matplotlib.pyplot as plt", False),
        ("from . import sibling", False),
        ("def (", True),
        ("def f():\n    import scipy\n", False),
    ],
)
def test_stdlib_only(code: str, lean: bool) -> None:
    assert stdlib_only(code) is lean


@pytest.mark.anyio
async def test_runs_go_to_the_zygote_their_imports_need(real_engine: Engine) -> None:
    probe = "import sys\n'pandas' in sys.modules"
    lean = await real_engine.run(probe)
    full = await real_engine.run("import numpy, sys\n'pandas' in sys.modules")
    with_input = await real_engine.run(probe, inputs=[Input(id="x", text=b"1")])
    assert lean.result == {"text/plain": "False"}
    assert full.result == {"text/plain": "True"}
    assert with_input.result == {"text/plain": "True"}  # sources go to the full runtime
    dynamic = await real_engine.run("__import__('numpy').arange(3).sum()")
    assert (dynamic.outcome, dynamic.result) == ("ok", {"text/plain": "np.int64(3)"})


@pytest.mark.anyio
async def test_the_start_up_probe_worker_is_the_pools_first() -> None:
    async with twin_engine(
        capacity=1, pool_size=1, lean=False, preload=(), limits=LIMITS
    ) as engine:
        assert engine._pool is not None
        stats = engine._pool.statistics()
        assert (stats.ready, stats.spawned) == (1, 0)  # ready, and the pool made none itself
        result = await engine.run("print(6 * 7)")
        assert (result.outcome, result.stdout) == ("ok", "42\n")


@pytest.mark.anyio
@pytest.mark.isolation
async def test_without_a_pool_each_run_gets_a_worker_made_for_it() -> None:
    one_run: dict[str, Any] = {"pool_size": 0, "prewarm": False, "lean": False, "preload": ()}
    async with Engine(capacity=1, limits=LIMITS, **one_run) as engine:  # corral run's
        pool = engine._pool
        assert pool is not None
        assert (pool.statistics().ready, pool.statistics().spawned) == (1, 0)  # the probe's
        for made in (0, 1, 2):
            result = await engine.run("import os\nos.getpid()")
            assert (result.outcome, result.result) == ("ok", {"text/plain": "1"})
            # The first run took the probe's worker; each later one a worker of its own, and
            # no spare is ever made.
            assert (pool.statistics().ready, pool.statistics().spawned) == (0, made)
