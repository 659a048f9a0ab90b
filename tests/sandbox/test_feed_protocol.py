"""A run request carries stdin and working files to the worker byte for byte."""

from __future__ import annotations

from corral.sandbox import RunRequest
from corral.sandbox._protocol import HEADER, RunLimits, decode_request, encode_message

LIMITS = RunLimits(
    memory_bytes=1, cpu_seconds=1, pids=1, file_bytes=1, open_files=1, max_files=1,
    max_file_bytes=1, max_display=1, display_bytes=1, output_chars=1,
)  # fmt: skip


def _round_trip(request: RunRequest) -> RunRequest:
    frame = encode_message(request)
    return decode_request(frame[HEADER.size :])


def test_stdin_and_files_round_trip() -> None:
    stdin = bytes(range(256)) + "é\n".encode()
    files = (("data/in.bin", b"\x00\xff"), ("empty", b""))
    request = RunRequest(code="pass", limits=LIMITS, stdin=stdin, files=files)
    assert _round_trip(request) == request


def test_no_stdin_stays_none_and_costs_nothing_on_the_wire() -> None:
    request = RunRequest(code="pass", limits=LIMITS)
    assert _round_trip(request) == request
    assert b"stdin" not in encode_message(request)
    assert _round_trip(RunRequest(code="", limits=LIMITS, stdin=b"")).stdin == b""
