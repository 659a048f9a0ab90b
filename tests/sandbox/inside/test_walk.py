"""The walk of a one-shot run's /work: any depth, two descriptors, names escaped, bounds kept."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from corral.sandbox.inside import _walk
from corral.sandbox.inside._walk import collect_files
from tests.sandbox.inside.deep_trees import remove_deep

DIR = "dddd"
LEVELS = 1100  # past Python's recursion limit, and 5,500 characters deep: past PATH_MAX


def _deep(root: Path, levels: int) -> None:
    # Paths this deep are past PATH_MAX: build them relative to a descriptor.
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(levels):
            os.mkdir(DIR, dir_fd=fd)
            child = os.open(DIR, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level == 9:
                with open(os.open("ten.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
                    f.write("ten")
    finally:
        os.close(fd)


def test_files_come_in_sorted_depth_first_order_with_digests(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "inner.txt").write_bytes(b"inner")
    (tmp_path / "a.txt").write_bytes(b"a")
    (tmp_path / "c.txt").write_bytes(b"c" * 100)
    (tmp_path / "link").symlink_to("/etc/passwd")  # never followed, never listed
    found = collect_files(str(tmp_path), max_files=10, max_bytes=10)
    assert [(f.path, f.size, f.content) for f in found.files] == [
        ("a.txt", 1, True),
        ("c.txt", 100, False),  # past the returned-bytes budget: listed, not returned
        ("b/inner.txt", 5, True),
    ]
    assert found.files[2].sha256 == hashlib.sha256(b"inner").hexdigest()
    assert found.contents == [b"a", b"inner"]
    assert found.omitted == 0


def test_files_past_the_count_are_counted(tmp_path: Path) -> None:
    for index in range(5):
        (tmp_path / f"f{index}").write_bytes(b"")
    found = collect_files(str(tmp_path), max_files=2, max_bytes=0)
    assert [f.path for f in found.files] == ["f0", "f1"]
    assert found.omitted == 3


def test_a_tree_deeper_than_path_max_is_walked(tmp_path: Path) -> None:
    _deep(tmp_path, LEVELS)
    try:
        found = collect_files(str(tmp_path), max_files=10, max_bytes=100)
    finally:
        remove_deep(tmp_path, DIR, LEVELS)
    assert [f.path for f in found.files] == [f"{DIR}/" * 10 + "ten.txt"]
    assert found.contents == [b"ten"]


def test_undecodable_names_are_escaped(tmp_path: Path) -> None:
    for raw in (b"\xff", b"tab\there", b"\xe2\x80\xaerlo"):
        with open(os.path.join(os.fsencode(tmp_path), raw), "wb") as handle:
            handle.write(b"x")
    found = collect_files(str(tmp_path), max_files=10, max_bytes=10)
    assert sorted(f.path for f in found.files) == ["\\u202erlo", "\\xff", "tab\\there"]


def test_the_walk_stops_at_its_entry_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_walk, "MAX_WALK_ENTRIES", 3)
    for index in range(10):
        (tmp_path / f"d{index}").mkdir()
        (tmp_path / f"d{index}" / "x").write_bytes(b"")
    found = collect_files(str(tmp_path), max_files=100, max_bytes=0)
    assert len(found.files) <= 3
