"""The pty helper's frames from the engine: whole or split anywhere, and refused when bad."""

from __future__ import annotations

import pytest

from corral.sandbox.inside._pty import DATA, RESIZE, _Frames, data_frame, resize_frame


def test_frames_split_at_every_byte_come_out_whole_and_in_order() -> None:
    stream = data_frame(b"echo hi\n") + resize_frame(100, 30) + data_frame(b"")
    frames = _Frames()
    seen = [frame for i in range(len(stream)) for frame in frames.feed(stream[i : i + 1])]
    assert seen == [(DATA, b"echo hi\n"), (RESIZE, b"\x00\x64\x00\x1e"), (DATA, b"")]


def test_unknown_kind_and_oversized_frame_are_refused() -> None:
    with pytest.raises(ValueError, match="no such frame"):
        _Frames().feed(b"X")
    with pytest.raises(ValueError, match="bound"):
        _Frames().feed(DATA + (1 << 30).to_bytes(4, "big"))
