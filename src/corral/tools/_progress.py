"""Progress without disclosure: metadata-only events for the people watching a call.

Progress is display-only and never part of the model's context, so it must not become a
second channel for what the call computes (docs/code-interpreter.md §8). Events are built
from phases, clocks and counts alone: never code, stdout, stderr, result, mounted text,
source ids, file names, paths or exception text. The event type cannot even hold them:
every field is a phase, a closed outcome name or a number.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Literal, NotRequired, TypedDict, get_args

from corral._mime import TEXT_PLAIN
from corral.engine import ExecutionResult, RunEvent

__all__ = [
    "PROGRESS_PHASES",
    "ProgressEvent",
    "ProgressPhase",
    "ProgressReporter",
    "ProgressSink",
    "describe_progress",
]

logger = logging.getLogger("corral.tools")

ProgressPhase = Literal["requested", "queued", "started", "executing", "finished"]
PROGRESS_PHASES: tuple[str, ...] = get_args(ProgressPhase)
"""In order; a call may skip ``queued`` (a free worker) or everything up to ``finished``."""


class OmittedCounts(TypedDict):
    stdout: int
    stderr: int
    result: int


class ProgressEvent(TypedDict):
    """One metadata-only progress event."""

    tool: str
    """The tool's registered name (fixed by the server, never chosen by the model)."""
    phase: ProgressPhase
    call: int
    """This call's number within its invocation; 0 when it was never admitted."""
    elapsed_ms: float
    """Milliseconds since the call was requested."""
    outcome: NotRequired[str]
    """``finished`` only: the closed outcome category (``ok``, ``timeout``, ...)."""
    stdout_chars: NotRequired[int]
    stderr_chars: NotRequired[int]
    result_chars: NotRequired[int]
    omitted_chars: NotRequired[OmittedCounts]
    display_count: NotRequired[int]
    file_count: NotRequired[int]
    source_count: NotRequired[int]


ProgressSink = Callable[[ProgressEvent], None]

# Engine phases forwarded as they happen; the engine's own "finished" is replaced by one
# built from the fitted result, which also covers calls refused before the engine.
_FORWARDED: frozenset[str] = frozenset({"queued", "started", "executing"})


class ProgressReporter:
    """The progress presenter of one call: feeds every sink, shields the call from them.

    Args:
        tool: the tool's registered name.
        sinks: receivers of each event; one raising is logged and skipped.
    """

    def __init__(self, tool: str, sinks: Sequence[ProgressSink]) -> None:
        self.tool = tool
        self.call = 0
        self.source_count = 0
        self.events: list[ProgressEvent] = []
        """Every event emitted, in order (for tests and for persisting a timeline)."""
        self._sinks = tuple(sinks)
        self._started = time.perf_counter()
        self._phases_seen: set[str] = set()

    def _emit(self, event: ProgressEvent) -> None:
        self.events.append(event)
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # display sinks are a boundary: their bugs must not end a run
                logger.exception("a progress sink of %s raised", self.tool)

    def _event(self, phase: ProgressPhase) -> ProgressEvent:
        elapsed = round((time.perf_counter() - self._started) * 1000.0, 3)
        return ProgressEvent(tool=self.tool, phase=phase, call=self.call, elapsed_ms=elapsed)

    def requested(self) -> None:
        self._emit(self._event("requested"))

    def on_run_event(self, event: RunEvent) -> None:
        """The engine's ``on_event``: forwards its phase, nothing else it carries."""
        phase = event.phase
        if phase in _FORWARDED and phase not in self._phases_seen:
            self._phases_seen.add(phase)
            self._emit(self._event(phase))

    def finished(self, result: ExecutionResult) -> None:
        event = self._event("finished")
        event["outcome"] = result.outcome
        event["stdout_chars"] = len(result.stdout)
        event["stderr_chars"] = len(result.stderr)
        event["result_chars"] = len(result.result.get(TEXT_PLAIN, "")) if result.result else 0
        event["omitted_chars"] = OmittedCounts(
            stdout=result.omitted["stdout"],
            stderr=result.omitted["stderr"],
            result=result.omitted["result"],
        )
        event["display_count"] = len(result.display)
        event["file_count"] = len(result.files)
        event["source_count"] = self.source_count
        self._emit(event)


def describe_progress(event: ProgressEvent) -> str:
    """A one-line, metadata-only sentence for a progress card or an MCP progress message."""
    head = f"{event['tool']}"
    if event["call"]:
        head += f" call {event['call']}"
    text = f"{head}: {event['phase']} after {event['elapsed_ms']:.0f} ms"
    if event["phase"] != "finished":
        return text
    omitted = event.get("omitted_chars")
    cut = omitted["stdout"] + omitted["stderr"] + omitted["result"] if omitted else 0
    text += (
        f"; outcome {event.get('outcome', '?')}; output {event.get('stdout_chars', 0)} stdout, "
        f"{event.get('stderr_chars', 0)} stderr, {event.get('result_chars', 0)} result characters"
    )
    if cut:
        text += f"; {cut} characters omitted"
    if event.get("display_count"):
        text += f"; {event['display_count']} display item(s)"
    return text
