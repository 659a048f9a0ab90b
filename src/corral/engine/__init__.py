"""Scheduling, deadlines, sessions, output fitting and typed outcomes.

Above: sources, tools, mistral and front ends, via exported names only. Below: corral.sandbox,
which knows no sessions, deadlines or wire formats. Not HTTP- or MCP-aware: front ends render
its ExecutionResults.

Each name is imported on first use, so that ``corral run`` can read its result types and
choose its zygote before it pays for the scheduler and the sandbox's host side.
"""

import typing

from corral import _public

if typing.TYPE_CHECKING:
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
    from corral.engine._stdlib import stdlib_only
    from corral.engine._stream import OutputEvent, OutputListener

_EXPORTS = {
    "Case": "corral.engine._cases",
    "Engine": "corral.engine._engine",
    "EngineStatistics": "corral.engine._engine",
    "ErrorInfo": "corral.engine._result",
    "Evidence": "corral.engine._result",
    "ExecutionResult": "corral.engine._result",
    "FileInfo": "corral.engine._result",
    "Input": "corral.engine._inputs",
    "InputEvidence": "corral.engine._result",
    "Omitted": "corral.engine._result",
    "Outcome": "corral.engine._result",
    "OutputEvent": "corral.engine._stream",
    "OutputListener": "corral.engine._stream",
    "RunEvent": "corral.engine._inputs",
    "RunEventSink": "corral.engine._inputs",
    "Session": "corral.engine._session",
    "SourceItem": "corral.engine._engine",
    "stdlib_only": "corral.engine._stdlib",
}

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

if not typing.TYPE_CHECKING:  # mypy reads the imports above
    __getattr__, __dir__ = _public.lazy_exports(globals(), _EXPORTS)
