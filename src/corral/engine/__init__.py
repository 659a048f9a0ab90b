"""Scheduling, deadlines, sessions, output fitting and typed outcomes.

Above: sources, tools, mistral and front ends, via exported names only. Below: corral.sandbox,
which knows no sessions, deadlines or wire formats. Not HTTP- or MCP-aware: front ends render
its ExecutionResults.
"""

import types

from corral.engine._engine import Engine, EngineStatistics
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

__all__ = [
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
    "RunEvent",
    "RunEventSink",
    "Session",
]

for _name in __all__:
    _obj = globals()[_name]
    # Tracebacks and reprs name the public path, not a private module.
    if isinstance(_obj, type | types.FunctionType):
        _obj.__module__ = __name__
del _name, _obj
