"""The framed worker protocol: every frame from a worker is untrusted."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator

import pytest

from corral.errors import WorkerError, WorkerProtocolError
from corral.sandbox._protocol import (
    MAX_CONTROL_FRAME,
    FrameDecoder,
    encode_bytes,
    encode_json,
    read_frame_sync,
    write_frames_sync,
)


def _frame(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    try:
        yield read_end, write_end
    finally:
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)


def test_protocol_error_is_a_worker_error() -> None:
    # The engine maps WorkerError to outcome worker_error; protocol errors must be among them.
    assert issubclass(WorkerProtocolError, WorkerError)


def test_frames_round_trip_byte_by_byte() -> None:
    message = {"t": "done", "result": {"text/plain": "é 中 😀"}, "n": [1, 2.5, None]}
    blob = bytes(range(256))
    wire = encode_json(message) + encode_bytes(blob) + encode_bytes(b"")
    decoder = FrameDecoder(MAX_CONTROL_FRAME)
    frames = []
    for i in range(len(wire)):  # a frame split anywhere is reassembled
        frames.extend(decoder.feed(wire[i : i + 1]))
    assert frames == [("J", message), ("B", blob), ("B", b"")]
    assert decoder.pending == 0


def test_several_frames_in_one_chunk() -> None:
    decoder = FrameDecoder(1024)
    wire = encode_json({"t": "started"}) + encode_json({"t": "done"})
    assert decoder.feed(wire + wire[:3]) == [("J", {"t": "started"}), ("J", {"t": "done"})]
    assert decoder.pending == 3


def test_oversized_frame_is_refused_from_its_header() -> None:
    decoder = FrameDecoder(100)
    assert decoder.feed(encode_bytes(b"x" * 100)) == [("B", b"x" * 100)]
    # Only the header has arrived: the bound applies before any payload is buffered.
    with pytest.raises(WorkerProtocolError):
        decoder.feed(struct.pack(">I", 101) + b"B")
    with pytest.raises(WorkerProtocolError):
        FrameDecoder(MAX_CONTROL_FRAME).feed(struct.pack(">I", 0xFFFFFFFF) + b"J")


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(_frame(b"J", b"{not json"), id="malformed-json"),
        pytest.param(_frame(b"J", b"[1, 2]"), id="json-not-an-object"),
        pytest.param(_frame(b"J", b'"text"'), id="json-string"),
        pytest.param(_frame(b"J", b"\xff\xfe{}"), id="invalid-utf8"),
        pytest.param(_frame(b"J", b""), id="empty-json"),
        pytest.param(_frame(b"X", b"{}"), id="unknown-kind"),
        pytest.param(_frame(b"\x00", b""), id="nul-kind"),
    ],
)
def test_malformed_frames_are_protocol_errors(wire: bytes) -> None:
    with pytest.raises(WorkerProtocolError):
        FrameDecoder(1024).feed(wire)


def test_sync_reader_and_writer_over_a_pipe(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    write_frames_sync(write_end, encode_json({"t": "run", "code": "1"}), encode_bytes(b"\x00\x01"))
    assert read_frame_sync(read_end, 1024) == ("J", {"t": "run", "code": "1"})
    assert read_frame_sync(read_end, 1024) == ("B", b"\x00\x01")


def test_sync_reader_refuses_oversized_and_malformed_frames(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.write(write_end, struct.pack(">I", 2048) + b"B")
    with pytest.raises(WorkerProtocolError):
        read_frame_sync(read_end, 1024)
    os.write(write_end, _frame(b"J", b"[]"))
    with pytest.raises(WorkerProtocolError):
        read_frame_sync(read_end, 1024)


def test_sync_reader_reports_a_closed_peer(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.write(write_end, encode_json({"t": "ready"})[:6])
    os.close(write_end)
    with pytest.raises(EOFError):
        read_frame_sync(read_end, 1024)
