"""Scheduling, deadlines, sessions, output fitting and typed outcomes.

Above: sources, tools, mistral and front ends, via exported names only. Below: corral.sandbox,
which knows no sessions, deadlines or wire formats. Not HTTP- or MCP-aware: front ends render
its ExecutionResults.
"""

from corral._public import publish as _publish
from corral.engine._cases import Case
from corral.engine._engine import Engine, EngineStatistics, SourceItem
from corral.engine._inputs import Input, RunEvent, RunEventSink
from corral.engine._result import (
    ErrorInfo,
    Evidence,
    ExecutionResult,
    FileInfo,
    InputEvidence,
    Omitted,
    Outcome,
)
from corral.engine._session import Session
from corral.engine._stream import OutputEvent, OutputListener
from corral.engine._supply import stdlib_only

__all__ = [
    "Case",
    "Engine",
    "EngineStatistics",
    "ErrorInfo",
    "Evidence",
    "ExecutionResult",
    "FileInfo",
    "Input",
    "InputEvidence",
    "Omitted",
    "Outcome",
    "OutputEvent",
    "OutputListener",
    "RunEvent",
    "RunEventSink",
    "Session",
    "SourceItem",
    "stdlib_only",
]

_publish(globals())
