"""The README's first screen: its example is examples/quickstart.py, and it runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_example_is_the_quickstart_file() -> None:
    source = (ROOT / "examples" / "quickstart.py").read_text()
    body = source.split('"""', 2)[2].lstrip("\n")  # the file adds only a docstring
    assert _first_python_block() == body


def test_the_setup_commands_are_the_ones_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    (test_command,) = [line for line in readme.splitlines() if line.endswith("scripts/test")]
    assert test_command in ci.splitlines()
    assert "corral serve" in readme.split("```sh", 1)[1].split("```", 1)[0]


@pytest.mark.isolation
def test_the_example_prints_ok_42() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "ok 42\n"), done.stderr


def _northstar_block() -> tuple[str, list[str]]:
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in readme.split("```sh\n")[1:] if "northstar.xlsx -c" in b)
    block = block.split("```", 1)[0]
    command, _, printed = block.partition("\n# ")
    code = command.split(" -c '", 1)[1].rstrip().removesuffix("'")
    return code, ("# " + printed).splitlines()


@pytest.mark.isolation
def test_the_northstar_example_prints_what_the_readme_shows() -> None:
    code, shown = _northstar_block()
    corral = str(Path(sys.executable).with_name("corral"))
    done = subprocess.run(
        [corral, "run", "--source", str(ROOT / "examples" / "northstar.xlsx"), "-c", code],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = [f"# {line}" for line in (done.stderr + done.stdout).splitlines()]
    assert len(printed) == len(shown), (printed, shown)  # no warning the README leaves out
    for got, expected in zip(printed, shown, strict=True):
        head, _, tail = expected.partition("...")
        assert got.startswith(head), (got, expected)
        assert got.endswith(tail), (got, expected)
