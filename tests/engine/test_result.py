"""The one result shape (docs/design.md §2) and its DIAL projection."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from corral.engine import ErrorInfo, Evidence, ExecutionResult, FileInfo, Outcome
from corral.errors import FileNotReturned

DESIGN_FIELDS = [
    "status", "outcome", "stdout", "stderr", "result", "display", "files", "omitted", "error",
    "elapsed_ms", "queued_ms", "evidence",
]  # fmt: skip
DIAL_FIELDS = ["status", "stdout", "stderr", "result", "display"]


def test_outcomes_are_the_designed_closed_set() -> None:
    assert set(get_args(Outcome)) == {
        "ok", "python_error", "timeout", "cancelled", "memory_limit", "invalid_input",
        "unavailable_source", "quota_exceeded", "busy", "worker_error",
    }  # fmt: skip


@pytest.mark.parametrize("outcome", get_args(Outcome))
def test_status_is_derived_from_outcome(outcome: Outcome) -> None:
    result = ExecutionResult(outcome=outcome)
    assert result.status == ("SUCCESS" if outcome == "ok" else "FAILURE")
    assert result.ok is (outcome == "ok")
    assert result.as_dict()["status"] == result.status
    assert result.as_dial()["status"] == result.status


def test_full_shape_is_json_ready_and_holds_the_design_fields() -> None:
    result = ExecutionResult(
        outcome="python_error",
        stdout="out\n",
        stderr="Traceback ...\n",
        result={"text/plain": "3"},
        display=({"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},),
        files=(FileInfo("out.csv", 4, "a" * 64),),
        error=ErrorInfo("ZeroDivisionError", "division by zero", "Traceback ..."),
        elapsed_ms=1.5,
        queued_ms=0.25,
        evidence=Evidence(code_sha256="b" * 64, runtime="corral; python 3.11"),
        file_contents={"out.csv": b"a,b\n"},
    )
    data = result.as_dict()
    assert set(DESIGN_FIELDS) <= set(data)
    assert json.loads(json.dumps(data)) == data
    assert data["files"] == [{"path": "out.csv", "size": 4, "sha256": "a" * 64}]
    assert data["error"] == {
        "type": "ZeroDivisionError",
        "message": "division by zero",
        "traceback": "Traceback ...",
    }
    assert data["omitted"] == {"stdout": 0, "stderr": 0, "result": 0}
    assert "file_contents" not in data  # bytes travel separately
    assert result.read_file("out.csv") == b"a,b\n"


def test_dial_projection_is_exactly_five_fields_in_order() -> None:
    result = ExecutionResult(
        outcome="ok", stdout="42\n", result={"text/plain": "42"}, elapsed_ms=1.0
    )
    dial = result.as_dial()
    assert list(dial) == DIAL_FIELDS
    assert dial == {
        "status": "SUCCESS",
        "stdout": "42\n",
        "stderr": "",
        "result": {"text/plain": "42"},
        "display": [],
    }
    assert list(ExecutionResult(outcome="timeout").as_dial()) == DIAL_FIELDS
    assert ExecutionResult(outcome="timeout").as_dial()["result"] == ""


def test_read_file_refuses_unlisted_paths_with_a_typed_error() -> None:
    with pytest.raises(FileNotReturned, match=r"'missing\.txt' is not among this result's files"):
        ExecutionResult(outcome="ok").read_file("missing.txt")
    cut = ExecutionResult(outcome="ok", files=(FileInfo("big.bin", 9, "0" * 64),))
    with pytest.raises(FileNotReturned, match="past the bound"):
        cut.read_file("big.bin")


def test_text_is_the_results_plain_text() -> None:
    assert ExecutionResult(outcome="ok", result={"text/plain": "42"}).text == "42"
    assert ExecutionResult(outcome="ok").text is None
