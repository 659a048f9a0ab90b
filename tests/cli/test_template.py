"""``corral template build | list | show | rm`` and ``corral run --template``, each its own
process on one data folder (a template outlives the process that built it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.network.internet import build_wheel

pytestmark = [pytest.mark.isolation, pytest.mark.timeout(300)]

CORRAL = str(Path(sys.executable).with_name("corral"))
_TIMEOUT = 180  # seconds for one command (a build starts an engine and runs pip)


def _corral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CORRAL, *args], env=env, capture_output=True, text=True, timeout=_TIMEOUT, check=False
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    wheels = tmp_path / "wheels"
    wheels.mkdir(mode=0o755)
    wheels.chmod(0o755)
    build_wheel(wheels).chmod(0o644)
    scrubbed = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    return {
        **scrubbed,
        "CORRAL_DATA_DIR": str(tmp_path / "data"),
        "CORRAL_PACKAGES_INDEX_URL": "",
        "CORRAL_PACKAGES_WHEELHOUSE": str(wheels),
    }


def test_build_list_run_and_remove(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("from the operator\n")
    (tmp_path / "requirements.txt").write_text("corral_test_pkg\n")
    built = _corral(
        env, "template", "build", "ops-stack", "-r", str(tmp_path / "requirements.txt"),
        "--copy", f"{tmp_path / 'notes.txt'}:docs/", "--env", "STACK=ops",
        "--run", "echo $STACK > stack.txt", "--preload", "corral_test_pkg",
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "Successfully installed corral_test_pkg" in built.stderr  # the log streams
    assert built.stdout == "template ops-stack built\n"

    listed = _corral(env, "template", "list")
    assert listed.stdout.startswith("ops-stack\tcode-interpreter-v1\toperator\t")
    shown = json.loads(_corral(env, "template", "show", "ops-stack").stdout)
    assert shown["preload"] == ["corral_test_pkg"]
    assert shown["env"] == {"STACK": "ops"}

    code = (
        "import sys, os, corral_test_pkg\n"
        "print('corral_test_pkg' in sys.modules, corral_test_pkg.VALUE, os.environ['STACK'])\n"
        "print(open('docs/notes.txt').read().strip(), open('stack.txt').read().strip())"
    )
    ran = _corral(env, "run", "--template", "ops-stack", "-c", code)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "True 42 ops\nfrom the operator ops\n"

    removed = _corral(env, "template", "rm", "ops-stack")
    assert removed.returncode == 0
    assert _corral(env, "template", "list").stdout == ""
    gone = _corral(env, "run", "--template", "ops-stack", "-c", "1")
    assert gone.returncode == 2
    assert "template 'ops-stack' not found" in gone.stderr


def test_refusals(env: dict[str, str]) -> None:
    bad = _corral(env, "template", "build", "Bad Name", "--run", "true")
    assert bad.returncode == 2
    assert "template name 'Bad Name'" in bad.stderr
    outside = _corral(env, "template", "build", "x", "--copy", "/etc/hostname:/etc/evil")
    assert outside.returncode == 2
    assert "outside the sandbox's home" in outside.stderr
    assert _corral(env, "template", "show", "x").returncode == 2  # nothing was built
    # (a failing step's log: tests/engine/test_templates.py, tests/e2b/test_templates.py)
