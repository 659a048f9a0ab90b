"""What the zygote imports: every module it loads is in each worker's heap, so the host side
(anyio, the engine) must stay out of it."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = ("anyio", "corral.sandbox.host", "corral.engine")


def _modules_after(statement: str) -> set[str]:
    probe = f"{statement}; import sys, json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout))


def test_the_zygote_module_imports_nothing_of_the_server_side() -> None:
    loaded = _modules_after("import corral.sandbox.inside._zygote")
    assert "corral.sandbox.inside._runner" in loaded  # the probe saw the zygote's imports
    leaked = sorted(m for m in loaded if m.startswith(SERVER_SIDE))
    assert not leaked, leaked


def test_the_sandbox_package_loads_a_name_only_when_it_is_used() -> None:
    loaded = _modules_after("import corral.sandbox")
    assert not {m for m in loaded if m.startswith("corral.sandbox.")}, loaded
    loaded = _modules_after("from corral.sandbox import SECCOMP_POLICY")
    assert "corral.sandbox.inside._seccomp" in loaded
    assert not {m for m in loaded if m.startswith(SERVER_SIDE)}
