"""The engine's reader: every frame from a worker is untrusted and held to the run's limits."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from corral.errors import WorkerProtocolError
from corral.sandbox._protocol import (
    HEADER,
    MAX_CONTROL_FRAME,
    MAX_JSON_NODES,
    Display,
    Done,
    ErrorReport,
    FileReport,
    FittedText,
    RunLimits,
    Started,
    Usage,
    encode_bytes,
    encode_json,
    encode_message,
    json_nodes,
    report_bound,
)
from corral.sandbox.host._reader import FrameBuffer, RunReader

LIMITS = RunLimits(
    memory_bytes=1 << 30,
    cpu_seconds=10,
    pids=64,
    file_bytes=1 << 20,
    open_files=64,
    max_files=3,
    max_file_bytes=1000,
    max_display=2,
    display_bytes=10_000,
    output_chars=100,
)


def _payload(frame: bytes) -> bytes:
    return frame[HEADER.size :]


def _read_all(wire: bytes, limits: RunLimits = LIMITS, step: int = 0) -> RunReader:
    shown: list[dict[str, Any]] = []
    reader = RunReader(limits, shown.append)
    buffer = FrameBuffer()
    chunks = [wire[i : i + step] for i in range(0, len(wire), step)] if step else [wire]
    for chunk in chunks:
        buffer.feed(chunk)
        while not reader.finished and (frame := buffer.next(reader.bound)) is not None:
            reader.accept(*frame)
    assert shown == reader.display
    return reader


def test_a_whole_run_round_trips_split_anywhere() -> None:
    done = Done(
        result={"text/html": "<b>3</b>"},
        plain=FittedText("é 中 😀", "", 0),
        error=ErrorReport("ValueError", "bad", "Traceback ..."),
        display_omitted=2,
        files=(FileReport("a/b.txt", 3, "0" * 64, True), FileReport("c", 9, "1" * 64, False)),
        files_omitted=4,
        usage=Usage(1.5, 1234),
    )
    wire = (
        encode_message(Started())
        + encode_message(Display({"text/plain": "shown"}))
        + encode_message(done)
        + encode_bytes(b"abc")
    )
    reader = _read_all(wire, step=1)  # a frame split anywhere is reassembled
    assert reader.finished
    assert reader.started
    assert reader.display == [{"text/plain": "shown"}]
    assert reader.done == done
    assert reader.contents == [b"abc"]


def test_a_frame_is_refused_from_its_header_before_its_payload() -> None:
    buffer = FrameBuffer()
    reader = RunReader(LIMITS, lambda _: None)
    buffer.feed(struct.pack(">I", MAX_CONTROL_FRAME + 1) + b"J")
    with pytest.raises(WorkerProtocolError, match="exceeds"):
        buffer.next(reader.bound)
    buffer = FrameBuffer()
    buffer.feed(struct.pack(">I", 0) + b"B")  # file bytes before anything asked for them
    with pytest.raises(WorkerProtocolError):
        buffer.next(reader.bound)


def test_file_frames_must_match_what_done_announced() -> None:
    start = encode_message(Started())
    done = Done(files=(FileReport("a", 3, "0" * 64, True),))
    # A forged frame claiming 16 MiB is refused from its 5-byte header.
    with pytest.raises(WorkerProtocolError, match="exceeds 3"):
        _read_all(start + encode_message(done) + struct.pack(">I", 16 << 20) + b"B")
    too_much = Done(files=tuple(FileReport(f"f{i}", 600, "0" * 64, True) for i in range(2)))
    with pytest.raises(WorkerProtocolError, match="returned-bytes"):
        _read_all(start + encode_message(too_much))
    too_many = Done(files=tuple(FileReport(f"f{i}", 1, "0" * 64, False) for i in range(4)))
    with pytest.raises(WorkerProtocolError, match="more files"):
        _read_all(start + encode_message(too_many))


def test_display_is_bounded_in_count_and_bytes() -> None:
    start = encode_message(Started())
    one = encode_message(Display({"text/plain": "x"}))
    with pytest.raises(WorkerProtocolError, match="count or byte"):
        _read_all(start + one * 3)
    big = encode_message(Display({"image/png": "A" * 10_000}))
    with pytest.raises(WorkerProtocolError, match="count or byte"):
        _read_all(start + big)
    long_text = encode_message(Display({"text/html": "x" * 1000}))
    with pytest.raises(WorkerProtocolError, match="ceiling"):
        _read_all(start + long_text)


def test_json_values_are_bounded_per_run() -> None:
    limits = RunLimits(
        **{**{n: getattr(LIMITS, n) for n in RunLimits.__slots__}, "display_bytes": 1 << 22}
    )
    flood = encode_json({"t": "display", "data": {"application/json": [[]] * MAX_JSON_NODES}})
    with pytest.raises(WorkerProtocolError, match="JSON values"):
        _read_all(encode_message(Started()) + flood, limits)
    # Commas inside a string are one value, not many.
    assert json_nodes(encode_json({"a": "," * 200_000})) < 10


def test_a_done_frame_is_bounded_by_the_run_limits() -> None:
    start = encode_message(Started())
    huge = encode_message(Done(plain=FittedText("x" * 101)))
    with pytest.raises(WorkerProtocolError, match="ceiling"):
        _read_all(start + huge)
    assert report_bound(LIMITS) < 1 << 20
