"""SandboxFusion's ``/run_code`` on the wire (docs/sandboxfusion.md): request bodies, the
response shape and the mapping from corral's outcomes onto SandboxFusion's statuses.

Pure data and functions, no routes: ``_sandboxfusion`` serves them. What a trainer must be able
to rely on is the split between a bad program (``Failed``, with the run's own return code or
``TimeLimitExceeded``) and a broken sandbox (``SandboxError``, never shaped like a wrong answer).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import posixpath
from dataclasses import replace
from typing import Any, Literal

from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral._digits import ascii_int
from corral.engine import PYTHON_NAMES, ExecutionResult
from corral.http._errors import JSON_SAFE

__all__ = [
    "BatchBody",
    "BatchCase",
    "RunCodeBody",
    "decode_files",
    "not_served",
    "passed",
    "sandbox_error",
    "to_response",
    "validation_detail",
    "work_path",
]

Language = Literal["python", "python3", "cpp", "nodejs", "java", "rust", "go", "typescript", "bash"]
"""SandboxFusion's names corral knows, and ``python3``, which it lacks but callers send; one
whose toolchain this host lacks is refused after parsing, in the same 422 (``not_served``)."""

_WORK_ROOTS = ("/work/", "/mnt/data/")  # where a one-shot run's working folder is seen
_EXIT_CODE_DIGITS = 32  # sys.exit(n) with a longer n is still only its low byte
_IGNORED_FILE = "IGNORE_THIS_FILE"  # SandboxFusion skips files whose name contains this
MAX_CASES = 1024
"""Cases one ``/run_code_batch`` request may hold (the request size bounds them too)."""


class RunCodeBody(BaseModel):
    """SandboxFusion's ``RunCodeRequest``; unknown fields are ignored, as its server does."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: Language
    stdin: str | None = None
    run_timeout: float = Field(default=10, gt=0)
    compile_timeout: float = Field(default=10, ge=0)
    """Python has no compile step; it bounds the wait for a free worker instead."""
    memory_limit_MB: int = -1
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


class BatchCase(BaseModel):
    """One test case of a ``/run_code_batch`` request."""

    model_config = ConfigDict(extra="ignore")

    stdin: str | None = None
    expected_stdout: str | None = None
    run_timeout: float | None = Field(default=None, gt=0)


class BatchBody(BaseModel):
    """One program, many cases: each case is a fresh isolated run."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: Language = "python"
    cases: list[BatchCase] = Field(min_length=1, max_length=MAX_CASES)
    run_timeout: float = Field(default=10, gt=0)
    """Seconds per case unless the case says otherwise."""
    compile_timeout: float = Field(default=10, ge=0)
    memory_limit_MB: int = -1
    files: dict[str, str | None] = Field(default_factory=dict)


def validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    """The ``detail`` list of FastAPI's 422 for a request body (without pydantic's URLs).

    A body that is not UTF-8 comes back as text with replacement characters, and a context
    that will not encode is left out: this answer must never fail in turn.
    """
    detail: list[dict[str, Any]] = []
    for error in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "type": error["type"],
            "loc": ["body", *error["loc"]],
            "msg": error["msg"],
            "input": _printable(error.get("input")),
        }
        if "ctx" in error:
            with contextlib.suppress(Exception):  # a context is a courtesy, never a failure
                item["ctx"] = jsonable_encoder(error["ctx"])
        detail.append(item)
    return detail


def _printable(value: Any) -> Any:
    try:
        return jsonable_encoder(value, custom_encoder=JSON_SAFE)
    except Exception:  # noqa: BLE001 - anything odd becomes its repr
        return repr(value)


def work_path(path: str) -> str | None:
    """``path`` relative to the run's working folder, or None if it lies outside it."""
    if "\0" in path:
        return None
    for root in _WORK_ROOTS:
        if path.startswith(root):
            path = path[len(root) :]
            break
    if path.startswith("/"):
        return None
    normal = posixpath.normpath(path)
    if normal in (".", "") or normal == ".." or normal.startswith("../"):
        return None
    return normal


def decode_files(files: dict[str, str | None]) -> tuple[dict[str, bytes], list[dict[str, Any]]]:
    """The files to write, by working-folder path, and 422 details for those that cannot be."""
    decoded: dict[str, bytes] = {}
    problems: list[dict[str, Any]] = []
    for name, content in files.items():
        if content is None or _IGNORED_FILE in name:
            continue
        where = work_path(name)
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            problems.append(_problem(name, "base64", "File content must be base64"))
            continue
        if where is None:
            problems.append(
                _problem(name, "path", "Files go in the working folder (relative, or /work/...)")
            )
            continue
        decoded[where] = data
    return decoded, problems


def _problem(name: str, kind: str, message: str) -> dict[str, Any]:
    return {"type": f"file_{kind}", "loc": ["body", "files", name], "msg": message, "input": name}


def _return_code(result: ExecutionResult, language: str) -> int:
    if language not in PYTHON_NAMES and result.exit_code is not None:
        # Another language's program: its own return code (-N for a signal, as Python's
        # subprocess reports it), passed on whole by the driver.
        return result.exit_code
    error = result.error
    if result.outcome == "ok" or error is None:
        return 0 if result.outcome == "ok" else 1
    if error.type != "SystemExit":
        return 1
    # sys.exit(n) reports str(n): None and "" exit 0, an int is its own code, text is 1.
    text = error.message.strip()
    if text in ("", "None"):
        return 0
    code = ascii_int(text, max_digits=_EXIT_CODE_DIGITS, signed=True)
    return 1 if code is None else code & 0xFF


def _command_result(
    status: str, result: ExecutionResult, return_code: int | None
) -> dict[str, Any]:
    return {
        "status": status,
        "execution_time": round(max(0.0, result.elapsed_ms - result.queued_ms) / 1000.0, 6),
        "return_code": return_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
    }


def sandbox_error(message: str) -> dict[str, Any]:
    """A ``SandboxError`` answer: the sandbox, not the program, failed."""
    return {
        "status": "SandboxError",
        "message": message,
        "compile_result": None,
        "run_result": None,
        "executor_pod_name": None,
        "files": {},
    }


def to_response(
    result: ExecutionResult, fetch_files: list[str], language: str = "python"
) -> dict[str, Any]:
    """SandboxFusion's ``RunCodeResponse`` for a finished corral run (never ``busy``)."""
    failed = _compile_failed(result)
    if failed is not None:
        return failed
    outcome = result.outcome
    if outcome == "timeout":
        status, run = "Failed", _command_result("TimeLimitExceeded", result, None)
    elif outcome in ("ok", "python_error", "memory_limit", "invalid_input"):
        # invalid_input is code Python itself would refuse (a NUL byte, say): it fails as a
        # program, with the reason on stderr; no sandbox was at fault.
        code = _return_code(result, language)
        if outcome == "invalid_input" and not result.stderr:
            result = _with_stderr(result, result.message)
        status = "Success" if code == 0 else "Failed"
        run = _command_result("Finished", result, code)
    else:  # worker_error, cancelled and anything else: the program never got a fair run
        return sandbox_error(result.message or f"the run ended as {outcome}")
    return {
        "status": status,
        "message": "",
        "compile_result": None if result.compile is None else result.compile.as_dict(),
        "run_result": run,
        "executor_pod_name": None,
        "files": _fetched(result, fetch_files),
    }


def _compile_failed(result: ExecutionResult) -> dict[str, Any] | None:
    """SandboxFusion's answer when the compile failed: ``Failed`` with the compile's result
    and no run (``SandboxError`` when the compile's sandbox failed), else None."""
    info = result.compile
    if info is None or (info.status == "Finished" and info.return_code == 0):
        return None
    if info.status == "Error":
        return sandbox_error(info.stderr or "the compile failed in the sandbox")
    return {
        "status": "Failed",
        "message": "",
        "compile_result": info.as_dict(),
        "run_result": None,
        "executor_pod_name": None,
        "files": {},
    }


def not_served(language: str, served: list[str]) -> list[dict[str, Any]]:
    """The 422 detail for a language this server does not serve, as pydantic words a
    ``Literal`` it is not among (SandboxFusion's answer to a language it does not know)."""
    expected = ", ".join(f"'{name}'" for name in served)
    return [
        {
            "type": "literal_error",
            "loc": ["body", "language"],
            "msg": f"Input should be {expected} (the languages served here; see corral doctor)",
            "input": language,
            "ctx": {"expected": expected},
        }
    ]


def _with_stderr(result: ExecutionResult, text: str) -> ExecutionResult:
    return replace(result, stderr=text + "\n")


def _fetched(result: ExecutionResult, fetch_files: list[str]) -> dict[str, str]:
    fetched: dict[str, str] = {}
    for name in fetch_files:
        where = work_path(name)
        data = result.file_contents.get(where) if where is not None else None
        if data is not None:
            fetched[name] = base64.b64encode(data).decode("ascii")
    return fetched


def passed(response: dict[str, Any], expected: str | None) -> bool | None:
    """verl's verdict: a successful, finished run whose stdout matches, newlines aside."""
    if expected is None:
        return None
    run = response.get("run_result")
    if response.get("status") != "Success" or not run or run.get("status") != "Finished":
        return False
    return str(run.get("stdout", "")).rstrip("\n") == expected.rstrip("\n")


class CommandResultDoc(BaseModel):
    """SandboxFusion's ``CommandRunResult`` (documentation of the answer)."""

    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None
    return_code: int | None
    stdout: str | None
    stderr: str | None


class RunCodeResponseDoc(BaseModel):
    """SandboxFusion's ``RunCodeResponse``: every key is present, with nulls."""

    status: Literal["Success", "Failed", "SandboxError"]
    message: str
    compile_result: CommandResultDoc | None
    run_result: CommandResultDoc | None
    executor_pod_name: str | None
    files: dict[str, str]


class CaseResultDoc(RunCodeResponseDoc):
    """One case of a batch; ``passed`` is null when the case gave no expectation."""

    passed: bool | None


class BatchResponseDoc(BaseModel):
    """``/run_code_batch``: one result per case, in case order."""

    results: list[CaseResultDoc]


class DetailDoc(BaseModel):
    """SandboxFusion's (FastAPI's) error body."""

    detail: Any
