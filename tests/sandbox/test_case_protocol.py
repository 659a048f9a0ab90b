"""The case server's control messages: round trips, and what the engine refuses."""

from __future__ import annotations

import json

import pytest

from corral.errors import WorkerProtocolError
from corral.sandbox._case_protocol import (
    CaseEnded,
    CasesRequest,
    CaseStart,
    CaseStop,
    Launch,
    decode_cases_request,
    decode_ended,
    decode_server_command,
    encode_case_message,
)
from corral.sandbox._protocol import HEADER, RunLimits, RunRequest, encode_message


def _payload(frame: bytes) -> bytes:
    return frame[HEADER.size :]


def test_messages_round_trip() -> None:
    request = CasesRequest("print('ü')\n")
    assert decode_cases_request(_payload(encode_case_message(request))) == request
    start = _payload(encode_case_message(CaseStart(2.5)))
    assert decode_server_command(start) == CaseStart(2.5)
    assert decode_server_command(_payload(encode_case_message(CaseStop()))) == CaseStop()
    for ended in (CaseEnded(True, False), CaseEnded(False, True)):
        assert decode_ended(_payload(encode_case_message(ended))) == ended


def test_a_run_request_is_not_a_cases_request() -> None:
    limits = RunLimits(
        memory_bytes=1, cpu_seconds=1, pids=1, file_bytes=1, open_files=1, max_files=1,
        max_file_bytes=1, max_display=1, display_bytes=1, output_chars=1,
    )  # fmt: skip
    run = _payload(encode_message(RunRequest(code='"t":"cases"', limits=limits)))
    assert decode_cases_request(run) is None
    assert decode_cases_request(b'{"t":"cases","code":1}') is None


@pytest.mark.parametrize(
    "payload",
    [b"", b"[]", b'{"t":"done"}', b'{"t":"ended"}', b'{"t":"ended","timed_out":1,"clean":true}',
     b'{"t":"ended","timed_out":false,"clean":"yes"}', b"\xff"],
)  # fmt: skip
def test_the_engine_refuses_a_malformed_answer(payload: bytes) -> None:
    with pytest.raises(WorkerProtocolError):
        decode_ended(payload)


def test_the_server_ignores_what_is_not_a_command() -> None:
    for payload in (b"{}", b'{"t":"case","seconds":"1"}', b'{"t":"case","seconds":NaN}', b"x"):
        assert decode_server_command(payload) is None
    assert decode_server_command(b'{"t":"case","seconds":-3}') == CaseStart(0.0)


def test_a_launch_round_trips() -> None:
    launch = Launch(
        argv=("java", "-Xmx{heap_mb}m", "Main"),
        env=(("JAVA_HOME", "/j"),),
        executables=("a.out",),
        artifact=("a.out", "Main.class"),
        heap_overhead_mb=720,
    )
    request = CasesRequest("# corral: java program\n", launch)
    assert decode_cases_request(_payload(encode_case_message(request))) == request


@pytest.mark.parametrize(
    "launch",
    [
        "not an object",
        {"argv": [], "env": [], "executables": [], "artifact": [], "heap_overhead_mb": 0},
        {"argv": ["x"], "env": [["A"]], "executables": [], "artifact": [], "heap_overhead_mb": 0},
        {"argv": ["x"], "env": [], "executables": [1], "artifact": [], "heap_overhead_mb": 0},
        {"argv": ["x"], "env": [], "executables": [], "artifact": [], "heap_overhead_mb": -1},
        {"argv": ["x"], "env": [], "executables": [], "artifact": [], "heap_overhead_mb": True},
        {"argv": ["x"], "env": [], "executables": [], "heap_overhead_mb": 0},
    ],
)
def test_a_malformed_launch_is_no_cases_request(launch: object) -> None:
    payload = json.dumps({"t": "cases", "code": "", "launch": launch}).encode()
    assert decode_cases_request(payload) is None
