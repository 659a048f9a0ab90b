"""The typed worker protocol: messages round-trip, and every frame from a worker is untrusted."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from corral.engine._fit import marker
from corral.errors import WorkerError, WorkerProtocolError
from corral.sandbox._protocol import (
    HEADER,
    MAX_CONTROL_FRAME,
    MAX_JSON_NODES,
    Display,
    Done,
    ErrorReport,
    FileReport,
    FittedText,
    InputSpec,
    RunLimits,
    RunRequest,
    Started,
    Usage,
    decode_message,
    decode_request,
    encode_bytes,
    encode_json,
    encode_message,
    json_nodes,
    read_frame_sync,
    report_bound,
    write_frames_sync,
)
from corral.sandbox.host._reader import FrameBuffer, RunReader
from corral.sandbox.inside._fitting import DisplaySender, clip, escape_name, fit_result, fit_text

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


def test_protocol_error_is_a_worker_error() -> None:
    # The engine maps WorkerError to outcome worker_error; protocol errors must be among them.
    assert issubclass(WorkerProtocolError, WorkerError)


def test_request_round_trips() -> None:
    request = RunRequest(
        code="print('é')", limits=LIMITS, inputs=(InputSpec(id="a", media_type="x", original=True),)
    )
    assert decode_request(_payload(encode_message(request))) == request


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


def test_fitting_keeps_exact_counts() -> None:
    text = "a" * 1000 + "b" * 1000
    fitted = fit_text(text, 100)
    assert fitted == FittedText("a" * 100, "b" * 100, 1800)
    assert fit_text("short", 100) == FittedText("short", "", 0)
    clipped = clip("z" * 10_000, 100)
    assert len(clipped) <= 100
    assert f"\n[... {10_000 - clipped.count('z')} characters omitted ...]\n" in clipped


def test_result_fitting_drops_oversized_text_and_keeps_the_rest() -> None:
    others, plain = fit_result(
        {"text/plain": "p" * 500, "text/html": "h" * 500, "image/png": "i" * 50},
        100,
        1000,
        MAX_JSON_NODES,
    )
    assert others == {"image/png": "i" * 50}
    assert plain == FittedText("p" * 100, "p" * 100, 300)


def test_the_display_sender_fits_counts_and_omits() -> None:
    sent: list[bytes] = []
    sender = DisplaySender()
    sender.reset(sent.append, max_items=2, max_bytes=1000, ceiling=60)
    sender({"text/plain": "q" * 100, "text/html": "h" * 100})
    sender({"image/png": "A" * 5000})  # over the byte budget
    sender({"text/plain": "ok"})
    sender({"text/plain": "one too many"})
    assert sender.omitted == 2
    shown = [decode_message(_payload(f)) for f in sent]
    assert shown[1] == Display({"text/plain": "ok"})
    first = shown[0]
    assert isinstance(first, Display)
    assert "text/html" not in first.data
    text = first.data["text/plain"]
    assert len(text) <= 60
    assert marker(100 - text.count("q")) in text


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain.txt", "plain.txt"),
        ("é中", "é中"),
        (os.fsdecode(b"\xff"), "\\xff"),
        ("a\nb", "a\\nb"),
        ("\x1b[31m", "\\x1b[31m"),
        ("rtl\u202etxt", "rtl\\u202etxt"),
    ],
)
def test_names_are_escaped_printable_text(name: str, shown: str) -> None:
    escaped = escape_name(name)
    assert escaped == shown
    assert escaped.isprintable()
    escaped.encode("utf-8")  # never a lone surrogate


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
