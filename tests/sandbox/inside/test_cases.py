"""The case server's own logic, in process: how it restores folders between cases.

The server itself, with real workers, is tested through ``/run_code_batch``
(``tests/http/test_sandboxfusion_batch.py``) and ``Engine.run_cases``
(``tests/engine/test_cases.py``); preparing its program in ``test_prepare.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from corral.sandbox.inside import _cases


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


def test_a_restore_past_its_time_gives_up(tmp_path: Path) -> None:
    # It runs after the case gave back its slot: a case that left more than the server may
    # wipe in RESTORE_SECONDS costs its server, not CPU that no slot holds.
    root = tmp_path / "work"
    root.mkdir()
    roots = (str(root),)
    baseline = _cases._snapshot(roots)
    (root / "made" / "deeper").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "made" / "deeper" / name).write_text(name)
    assert not _cases._restore(baseline, roots, seconds=-1.0)  # out of time from the start
    assert (root / "made").exists()  # given up on, not half-pretended
    assert _cases._restore(baseline, roots)  # within its time, a made tree goes entirely
    assert list(root.iterdir()) == []
