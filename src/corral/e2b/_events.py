"""corral's run output as the code interpreter's ``/execute`` NDJSON events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from corral._mime import E2B_CHART, MIME_SHORT_NAMES
from corral.engine import ExecutionResult

__all__ = [
    "StreamedOutput",
    "end_event",
    "error_event",
    "from_result",
    "output_event",
    "result_event",
]


def _line(event: Mapping[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False).encode() + b"\n"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def output_event(stream: str, text: str) -> bytes:
    return _line({"type": stream, "text": text, "timestamp": _now()})


def result_event(bundle: Mapping[str, Any], *, main: bool) -> bytes:
    event: dict[str, Any] = {"type": "result", "is_main_result": main}
    extra: dict[str, Any] = {}
    for mime, value in bundle.items():
        field = "chart" if mime == E2B_CHART else MIME_SHORT_NAMES.get(mime)
        if field is not None:
            event[field] = value
        else:
            extra[mime] = value
    if extra:
        event["extra"] = extra
    return _line(event)


def error_event(name: str, value: str, traceback: str) -> bytes:
    return _line({"type": "error", "name": name, "value": value, "traceback": traceback})


def end_event(execution_count: int) -> bytes:
    return _line({"type": "number_of_executions", "execution_count": execution_count}) + _line(
        {"type": "end_of_execution"}
    )


_TRACEBACK_STARTS = ("Traceback (most recent call last):", '  File "<cell>"')


def _traceback_start(text: str) -> int:
    found = [i for i in (text.find(start) for start in _TRACEBACK_STARTS) if i >= 0]
    return min(found, default=-1)


class StreamedOutput:
    """corral's streamed output as events, less the traceback a kernel would not print.

    corral's stderr carries the exception's traceback too; E2B reports it as the error only.
    stderr from where a traceback seems to start is held back until more output follows (it
    was the user's own, then) or the run ends (then the error's traceback is dropped).
    """

    def __init__(self) -> None:
        self._held = ""

    def output(self, kind: str, text: str) -> list[bytes]:
        if kind == "stderr":
            if self._held:
                self._held += text
                return []
            start = _traceback_start(text)
            if start < 0:
                return [output_event("stderr", text)]
            self._held = text[start:]
            return [output_event("stderr", text[:start])] if start else []
        return [*self._release(), output_event(kind, text)]

    def display(self, bundle: Mapping[str, Any]) -> list[bytes]:
        return [*self._release(), result_event(bundle, main=False)]

    def _release(self) -> list[bytes]:
        held, self._held = self._held, ""
        return [output_event("stderr", held)] if held else []

    def finish(self, result: ExecutionResult) -> list[bytes]:
        if result.error is not None and self._held.endswith(result.error.traceback):
            self._held = self._held[: len(self._held) - len(result.error.traceback)]
        return self._release()


def from_result(result: ExecutionResult, *, streamed: bool) -> list[bytes]:
    """The events of a finished run; without ``streamed``, its output and displays too."""
    lines: list[bytes] = []
    if not streamed:
        stderr = result.stderr
        if result.error is not None and stderr.endswith(result.error.traceback):
            # A kernel reports the exception as the error only, not on stderr too.
            stderr = stderr[: len(stderr) - len(result.error.traceback)]
        if result.stdout:
            lines.append(output_event("stdout", result.stdout))
        if stderr:
            lines.append(output_event("stderr", stderr))
        lines.extend(result_event(bundle, main=False) for bundle in result.display)
    if result.result:
        lines.append(result_event(result.result, main=True))
    if result.error is not None:
        lines.append(error_event(result.error.type, result.error.message, result.error.traceback))
    elif result.outcome not in ("ok", "python_error"):
        # The run stopped for a reason of corral's (deadline, memory, a closed session): the
        # SDK shows it as the execution's error, as E2B shows a kernel's.
        name = {"timeout": "TimeoutError", "memory_limit": "MemoryError"}.get(
            result.outcome, "RuntimeError"
        )
        lines.append(error_event(name, result.message or result.outcome, ""))
    return lines
