"""Which zygote serves a run: stdlib-only code gets a lean worker, anything else the full one."""

from __future__ import annotations

import pytest

from corral.engine import Engine, Input
from corral.engine._supply import stdlib_only


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
@pytest.mark.isolation
async def test_runs_go_to_the_zygote_their_imports_need(engine: Engine) -> None:
    probe = "import sys\n'pandas' in sys.modules"
    lean = await engine.run(probe)
    full = await engine.run("import numpy, sys\n'pandas' in sys.modules")
    with_input = await engine.run(probe, inputs=[Input(id="x", text=b"1")])
    assert lean.result == {"text/plain": "False"}
    assert full.result == {"text/plain": "True"}
    assert with_input.result == {"text/plain": "True"}  # sources go to the full runtime
    dynamic = await engine.run("__import__('numpy').arange(3).sum()")
    assert (dynamic.outcome, dynamic.result) == ("ok", {"text/plain": "np.int64(3)"})
