"""The one result shape corral speaks everywhere (docs/design.md §2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from corral._mime import TEXT_PLAIN
from corral.errors import FileNotReturned

__all__ = [
    "FAILURE_OUTCOMES",
    "CompileInfo",
    "ErrorInfo",
    "Evidence",
    "ExecutionResult",
    "FileInfo",
    "InputEvidence",
    "MimeBundle",
    "Omitted",
    "Outcome",
]

Outcome = Literal[
    "ok",
    "python_error",
    "timeout",
    "cancelled",
    "memory_limit",
    "invalid_input",
    "unavailable_source",
    "quota_exceeded",
    "busy",
    "worker_error",
]
FAILURE_OUTCOMES: frozenset[str] = frozenset(
    {
        "python_error",
        "timeout",
        "cancelled",
        "memory_limit",
        "invalid_input",
        "unavailable_source",
        "quota_exceeded",
        "busy",
        "worker_error",
    }
)

MimeBundle = dict[str, Any]
"""MIME type to value: strings, except JSON types, whose values are JSON objects."""


class Omitted(TypedDict):
    """Exact characters cut from each channel by output fitting."""

    stdout: int
    stderr: int
    result: int


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A file the code left in its working folder."""

    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """The exception that ended user code (outcome ``python_error`` or ``memory_limit``)."""

    type: str
    message: str
    traceback: str

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass(frozen=True, slots=True)
class InputEvidence:
    """Which input a run saw, by id and digest of the mounted text."""

    id: str
    sha256: str
    original_sha256: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "sha256": self.sha256}
        if self.original_sha256 is not None:
            data["original_sha256"] = self.original_sha256
        return data


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a result was computed from: code, runtime, inputs, limits.

    What it is for: docs/code-interpreter.md §11.
    """

    code_sha256: str
    runtime: str
    inputs: tuple[InputEvidence, ...] = ()
    limits: Mapping[str, float | int] = field(default_factory=dict)
    isolation: str = "namespaces+seccomp"

    def as_dict(self) -> dict[str, Any]:
        return {
            "code_sha256": self.code_sha256,
            "runtime": self.runtime,
            "inputs": [i.as_dict() for i in self.inputs],
            "limits": dict(self.limits),
            "isolation": self.isolation,
        }


@dataclass(frozen=True, slots=True)
class CompileInfo:
    """How a compiled language's compile went (SandboxFusion's ``compile_result``)."""

    status: Literal["Finished", "TimeLimitExceeded", "Error"]
    return_code: int | None
    """The compiler's exit code (None unless ``Finished``)."""
    execution_time: float
    """Seconds the compile took (the one that made a cached artifact, for a cache hit)."""
    stdout: str
    stderr: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "execution_time": self.execution_time,
            "return_code": self.return_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionResult:
    """The outcome of one execution.

    ``status`` is derived from ``outcome``: SUCCESS only for ``ok``. File bytes are not part
    of the serialised shape; read them with :meth:`read_file`.
    """

    outcome: Outcome
    stdout: str = ""
    stderr: str = ""
    result: MimeBundle | Literal[""] = ""
    display: tuple[MimeBundle, ...] = ()
    files: tuple[FileInfo, ...] = ()
    omitted: Omitted = field(default_factory=lambda: Omitted(stdout=0, stderr=0, result=0))
    error: ErrorInfo | None = None
    elapsed_ms: float = 0.0
    queued_ms: float = 0.0
    cpu_ms: float | None = None
    peak_rss_kb: int | None = None
    restarted: bool = False
    """A session's interpreter was restarted before or by this run (its variables are gone)."""
    message: str = ""
    """Why the run ended this way, for outcomes other than ``ok`` and ``python_error``."""
    exit_code: int | None = None
    """The code passed to ``sys.exit`` (0 for ``sys.exit()``), or None if it was not called."""
    evidence: Evidence | None = None
    file_contents: Mapping[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    compile: CompileInfo | None = None
    """For a compiled language: its compile (a failed one means the program never ran)."""

    @property
    def status(self) -> Literal["SUCCESS", "FAILURE"]:
        return "SUCCESS" if self.outcome == "ok" else "FAILURE"

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def text(self) -> str | None:
        """The ``text/plain`` form of the trailing expression's value, or None without one."""
        if not self.result:
            return None
        plain = self.result.get(TEXT_PLAIN)
        return plain if isinstance(plain, str) else None

    def read_file(self, path: str) -> bytes:
        """The bytes of a file listed in ``files``.

        Raises:
            FileNotReturned: the file is not listed, or its content exceeded the
                returned-bytes bound (``Limits.max_file_bytes``).
        """
        try:
            return self.file_contents[path]
        except KeyError:
            pass
        if any(info.path == path for info in self.files):
            raise FileNotReturned(
                f"{path!r} is listed, but its bytes were past the bound on returned file bytes"
            )
        listed = ", ".join(repr(info.path) for info in self.files[:5]) or "none"
        raise FileNotReturned(f"{path!r} is not among this result's files (listed: {listed})")

    def as_dict(self) -> dict[str, Any]:
        """The full JSON shape of docs/design.md §2 (plus resource use)."""
        return {
            "status": self.status,
            "outcome": self.outcome,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "result": dict(self.result) if self.result else "",
            "display": [dict(d) for d in self.display],
            "files": [f.as_dict() for f in self.files],
            "omitted": dict(self.omitted),
            "error": self.error.as_dict() if self.error else None,
            "message": self.message,
            "restarted": self.restarted,
            "exit_code": self.exit_code,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "queued_ms": round(self.queued_ms, 3),
            "cpu_ms": None if self.cpu_ms is None else round(self.cpu_ms, 3),
            "peak_rss_kb": self.peak_rss_kb,
            "evidence": self.evidence.as_dict() if self.evidence else None,
            **({"compile": self.compile.as_dict()} if self.compile is not None else {}),
        }

    def as_dial(self) -> dict[str, Any]:
        """Exactly DIAL's five fields, in DIAL's order (DIAL Core rejects unknown fields)."""
        return {
            "status": self.status,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "result": dict(self.result) if self.result else "",
            "display": [dict(d) for d in self.display],
        }
