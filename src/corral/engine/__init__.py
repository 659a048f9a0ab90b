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
    from corral.engine._keepsafe import PauseMode, SnapshotMeta
    from corral.engine._languages import (
        LANGUAGE_NAMES,
        PYTHON_NAMES,
        Languages,
        Toolchain,
        discover_languages,
        language_for_path,
    )
    from corral.engine._packages import PackageSources
    from corral.engine._result import (
        CompileInfo,
        ErrorInfo,
        Evidence,
        ExecutionResult,
        FileInfo,
        InputEvidence,
        Omitted,
        Outcome,
    )
    from corral.engine._session import Session, SessionManager
    from corral.engine._stdlib import stdlib_only
    from corral.engine._stream import OutputEvent, OutputListener
    from corral.engine._template_build import BuildLog, LogLine, build_network, build_template

_EXPORTS = {
    "LANGUAGE_NAMES": "corral.engine._languages",
    "PYTHON_NAMES": "corral.engine._languages",
    "Case": "corral.engine._cases",
    "CompileInfo": "corral.engine._result",
    "Languages": "corral.engine._languages",
    "Toolchain": "corral.engine._languages",
    "discover_languages": "corral.engine._languages",
    "language_for_path": "corral.engine._languages",
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
    "PackageSources": "corral.engine._packages",
    "RunEvent": "corral.engine._inputs",
    "RunEventSink": "corral.engine._inputs",
    "PauseMode": "corral.engine._keepsafe",
    "Session": "corral.engine._session",
    "SessionManager": "corral.engine._session",
    "SnapshotMeta": "corral.engine._keepsafe",
    "SourceItem": "corral.engine._engine",
    "stdlib_only": "corral.engine._stdlib",
    "BuildLog": "corral.engine._template_build",
    "LogLine": "corral.engine._template_build",
    "build_network": "corral.engine._template_build",
    "build_template": "corral.engine._template_build",
}

__all__ = [
    "LANGUAGE_NAMES",
    "PYTHON_NAMES",
    "BuildLog",
    "Case",
    "CompileInfo",
    "Engine",
    "EngineStatistics",
    "ErrorInfo",
    "Evidence",
    "ExecutionResult",
    "FileInfo",
    "Input",
    "InputEvidence",
    "Languages",
    "LogLine",
    "Omitted",
    "Outcome",
    "OutputEvent",
    "OutputListener",
    "PackageSources",
    "PauseMode",
    "RunEvent",
    "RunEventSink",
    "Session",
    "SessionManager",
    "SnapshotMeta",
    "SourceItem",
    "Toolchain",
    "build_network",
    "build_template",
    "discover_languages",
    "language_for_path",
    "stdlib_only",
]

if not typing.TYPE_CHECKING:  # mypy reads the imports above
    __getattr__, __dir__ = _public.lazy_exports(globals(), _EXPORTS)
