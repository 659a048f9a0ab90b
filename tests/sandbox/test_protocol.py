"""The typed worker protocol: messages round-trip, and malformed ones are protocol errors."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator

import pytest

from corral.errors import WorkerError, WorkerProtocolError
from corral.sandbox._protocol import (
    HEADER,
    Display,
    InputSpec,
    RunLimits,
    RunRequest,
    Started,
    decode_message,
    decode_request,
    encode_message,
    read_frame_sync,
    write_frames_sync,
)

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


def _frame(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload


def _payload(frame: bytes) -> bytes:
    return frame[HEADER.size :]


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


def test_request_round_trips() -> None:
    request = RunRequest(
        code="print('é')", limits=LIMITS, inputs=(InputSpec(id="a", media_type="x", original=True),)
    )
    assert decode_request(_payload(encode_message(request))) == request


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"{not json", id="malformed-json"),
        pytest.param(b"[1, 2]", id="json-not-an-object"),
        pytest.param(b"\xff\xfe{}", id="invalid-utf8"),
        pytest.param(b"", id="empty-json"),
        pytest.param(b'{"t": "nope"}', id="unknown-type"),
        pytest.param(b'{"t": "display", "data": [1]}', id="display-not-a-bundle"),
        pytest.param(b'{"t": "done", "files": [[1, 2]]}', id="short-file-entry"),
        pytest.param(b'{"t": "done", "files": "x"}', id="files-not-a-list"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deep-nesting"),
    ],
)
def test_malformed_messages_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(WorkerProtocolError):
        decode_message(payload)


def test_a_lone_surrogate_never_breaks_the_encoder() -> None:
    frame = encode_message(Display({"text/plain": "\ud800"}))
    message = decode_message(_payload(frame))
    assert message == Display({"text/plain": "\\ud800"})


def test_sync_reader_and_writer_over_a_pipe(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    request = RunRequest(code="1", limits=LIMITS)
    write_frames_sync(write_end, encode_message(request))
    assert decode_request(read_frame_sync(read_end, 1024)) == request


def test_sync_reader_refuses_oversized_and_binary_frames(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.write(write_end, struct.pack(">I", 2048) + b"J")
    with pytest.raises(WorkerProtocolError):
        read_frame_sync(read_end, 1024)
    os.write(write_end, _frame(b"B", b"[]"))
    with pytest.raises(WorkerProtocolError):
        read_frame_sync(read_end, 1024)


def test_sync_reader_reports_a_closed_peer(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.write(write_end, encode_message(Started())[:6])
    os.close(write_end)
    with pytest.raises(EOFError):
        read_frame_sync(read_end, 1024)
