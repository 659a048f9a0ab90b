"""A saved interpreter state is one stream written as files of a bounded size: writing across
their boundaries, and forgetting a value that could not be pickled, keep the stream whole."""

from __future__ import annotations

import os
from pathlib import Path

from corral.sandbox.inside._keep import _Rolling


def _joined(base: Path, count: int) -> bytes:
    return b"".join((base.parent / f"{base.name}.{i}").read_bytes() for i in range(count))


def test_a_stream_crosses_file_boundaries_and_forgets_what_is_rolled_back(
    tmp_path: Path,
) -> None:
    base = tmp_path / "keep"
    out = _Rolling(str(base), 10)
    out.write(b"0123456789abc")  # two files
    mark = out.tell()
    out.write(b"x" * 25)  # three more
    out.rollback(mark)
    out.write(b"de")
    at_boundary = out.tell()
    out.write(b"fghij")  # fills the second file exactly
    assert out.tell() == 20
    out.write(b"y" * 3)
    out.rollback(20)  # back to a boundary: the third file goes
    count = out.finish()
    assert count == 2
    assert _joined(base, count) == b"0123456789abcdefghij"
    assert at_boundary == 15
    assert sorted(os.listdir(tmp_path)) == ["keep.0", "keep.1"]


def test_rolling_back_to_the_start_keeps_one_empty_file(tmp_path: Path) -> None:
    base = tmp_path / "keep"
    out = _Rolling(str(base), 4)
    out.write(memoryview(b"abcdefgh"))
    out.rollback(0)
    out.write(b"z")
    assert out.finish() == 1
    assert _joined(base, 1) == b"z"
