"""The case server's own logic, in process: what it pre-imports and how it restores folders.

The server itself, with real workers, is tested through ``/run_code_batch``
(``tests/http/test_sandboxfusion_batch.py``) and ``Engine.run_cases``
(``tests/engine/test_cases.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.sandbox.inside import _cases

WARNS = "tests.sandbox.inside.warns_on_import"


@pytest.fixture
def forget() -> Iterator[None]:
    """Modules the test imports are dropped again afterwards."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.mark.usefixtures("forget")
def test_preimport_takes_standard_library_imports_at_top_level() -> None:
    for name in ("colorsys", "wave", "this", "sched"):
        sys.modules.pop(name, None)
    _cases._preimport(
        "import colorsys\nfrom wave import open as wopen\nimport this\n"
        "def f():\n    import sched\n"
        "import surely_not_a_module_anywhere\n"
    )
    assert "colorsys" in sys.modules
    assert "wave" in sys.modules
    assert "this" not in sys.modules  # it prints when imported: each case does it itself
    assert "sched" not in sys.modules  # not at top level
    assert "surely_not_a_module_anywhere" not in sys.modules


@pytest.mark.usefixtures("forget")
def test_preimport_drops_a_module_that_warns_as_it_is_imported() -> None:
    sys.modules.pop(WARNS, None)
    _cases._preimport(f"import {WARNS}\n")
    assert WARNS not in sys.modules  # each case imports it, and sees the warning


def test_preimport_ignores_code_that_does_not_compile() -> None:
    _cases._preimport("import (\n")


def _tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(path.relative_to(root)), path.lstat().st_mode) for path in root.rglob("*"))


def test_restore_puts_a_folder_back_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "kept" / "inner").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    roots = (str(root),)
    baseline = _cases._snapshot(roots)
    before = _tree(root)
    (root / "kept" / "inner" / "new.txt").write_text("x")
    (root / "made" / "deeper").mkdir(parents=True)
    (root / "made" / "deeper" / "f").write_text("y")
    (root / "link").symlink_to(outside)
    (root / "kept" / "link").symlink_to(outside / "precious")
    (root / "kept").chmod(0o700)
    os.mkfifo(root / "fifo")
    assert _cases._restore(baseline, roots)
    assert _tree(root) == before
    assert (outside / "precious").read_text() == "keep me"  # links are removed, not followed


def test_restore_fails_when_a_folder_cannot_be_restored(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "kept").mkdir(parents=True)
    roots = (str(root),)
    baseline = _cases._snapshot(roots)
    (root / "kept").rmdir()
    assert not _cases._restore(baseline, roots)  # a kept folder is gone
    (root / "kept").mkdir()
    assert _cases._restore(baseline, roots)
    # (A folder the case made unremovable, chmod 0, is tested in the sandbox, where the
    # server is not root: tests/http/test_sandboxfusion_batch.py.)
