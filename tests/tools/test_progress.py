"""The progress presenter: phases and counts only, whatever the run carried."""

from __future__ import annotations

import json
import typing

import pytest

from corral.engine import ErrorInfo, ExecutionResult, FileInfo, Omitted, RunEvent
from corral.tools import PROGRESS_PHASES, ProgressEvent, ProgressReporter, describe_progress

SECRET = "SECRET-0c1f"


def _result() -> ExecutionResult:
    return ExecutionResult(
        outcome="python_error",
        stdout=f"out {SECRET}",
        stderr=f"err {SECRET}",
        result={"text/plain": f"'{SECRET}'"},
        display=({"text/plain": SECRET},),
        files=(FileInfo(f"{SECRET}.csv", 3, "0" * 64),),
        omitted=Omitted(stdout=5, stderr=0, result=2),
        error=ErrorInfo("ValueError", SECRET, SECRET),
        message=SECRET,
    )


def test_phases_are_the_seed_card_phases_in_order() -> None:
    assert PROGRESS_PHASES == ("requested", "queued", "started", "executing", "finished")


def test_event_fields_are_numbers_or_closed_names() -> None:
    # Structural privacy: the event type has no field that could hold code, output or a path.
    hints = typing.get_type_hints(ProgressEvent)
    free_text = {name for name, hint in hints.items() if hint is str}
    assert free_text == {"tool", "outcome"}


def test_the_reporter_forwards_engine_phases_once_and_nothing_else() -> None:
    seen: list[ProgressEvent] = []
    reporter = ProgressReporter("code_interpreter", [seen.append])
    reporter.requested()
    reporter.call = 3
    for phase in ("queued", "started", "started", "executing"):  # a repeat is dropped
        reporter.on_run_event(RunEvent(phase=phase, elapsed_ms=1.0))
    reporter.on_run_event(RunEvent(phase="finished", elapsed_ms=2.0, outcome="ok"))
    assert [e["phase"] for e in seen] == ["requested", "queued", "started", "executing"]
    assert [e["call"] for e in seen] == [0, 3, 3, 3]
    assert all(set(e) == {"tool", "phase", "call", "elapsed_ms"} for e in seen)
    assert [e["elapsed_ms"] for e in seen] == sorted(e["elapsed_ms"] for e in seen)


def test_finished_carries_sizes_and_exact_omission_counts_but_no_content() -> None:
    seen: list[ProgressEvent] = []
    reporter = ProgressReporter("code_interpreter", [seen.append])
    reporter.call = 1
    reporter.source_count = 2
    reporter.finished(_result())
    (event,) = seen
    assert event["outcome"] == "python_error"
    assert event["stdout_chars"] == len(f"out {SECRET}")
    assert event["omitted_chars"] == {"stdout": 5, "stderr": 0, "result": 2}
    assert event["display_count"] == 1
    assert event["file_count"] == 1
    assert event["source_count"] == 2
    assert SECRET not in json.dumps(event)
    assert SECRET not in describe_progress(event)
    assert reporter.events == seen


def test_a_failing_sink_neither_stops_the_call_nor_the_other_sinks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[ProgressEvent] = []

    def broken(_: ProgressEvent) -> None:
        raise RuntimeError("card renderer bug")

    reporter = ProgressReporter("code_interpreter", [broken, seen.append])
    reporter.requested()
    assert len(seen) == 1
    assert "progress sink" in caplog.text


def test_describe_progress_is_one_metadata_line() -> None:
    reporter = ProgressReporter("code_interpreter", [])
    reporter.requested()
    assert describe_progress(reporter.events[0]).startswith("code_interpreter: requested after ")
    reporter.call = 2
    reporter.finished(_result())
    line = describe_progress(reporter.events[-1])
    assert line.startswith("code_interpreter call 2: finished after ")
    assert "outcome python_error" in line
    assert "7 characters omitted" in line
    assert "1 display item(s)" in line
    assert "\n" not in line
