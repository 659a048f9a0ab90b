"""Turning a worker's report into an ExecutionResult: validation, fitting, typed outcomes."""

from __future__ import annotations

import hashlib
import re
from functools import partial
from typing import Any, Literal

from corral._limits import Limits
from corral.engine._fit import StreamFitter, fit_channels
from corral.engine._result import ErrorInfo, ExecutionResult, FileInfo, MimeBundle, Omitted, Outcome
from corral.engine._stream import OutputTap
from corral.errors import WorkerProtocolError

__all__ = ["Capture", "build_result"]

_SHA256 = re.compile(r"[0-9a-f]{64}")


class Capture:
    """The bounded stdout and stderr of one run, filled while it runs."""

    def __init__(self, limits: Limits, tap: OutputTap | None = None) -> None:
        self.tap = tap
        if tap is None:
            self.stdout = StreamFitter(limits.output_chars)
            self.stderr = StreamFitter(limits.output_chars)
        else:
            self.stdout = StreamFitter(limits.output_chars, partial(tap.text, "stdout"))
            self.stderr = StreamFitter(limits.output_chars, partial(tap.text, "stderr"))


def _str_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WorkerProtocolError(f"{what} is not a MIME bundle")
    return value


def _files(
    report: dict[str, Any], contents: list[bytes], limits: Limits
) -> tuple[tuple[FileInfo, ...], dict[str, bytes]]:
    raw = report.get("files", [])
    if not isinstance(raw, list) or len(raw) > limits.max_files:
        raise WorkerProtocolError("bad file list")
    infos: list[FileInfo] = []
    data: dict[str, bytes] = {}
    blobs = iter(contents)
    for item in raw:
        if not isinstance(item, dict):
            raise WorkerProtocolError("bad file entry")
        path, size, digest = item.get("path"), item.get("size"), item.get("sha256")
        if (
            not isinstance(path, str)
            or path.startswith("/")
            or ".." in path.split("/")
            or not isinstance(size, int)
            or not isinstance(digest, str)
            or not _SHA256.fullmatch(digest)
        ):
            raise WorkerProtocolError("bad file entry")
        infos.append(FileInfo(path, size, digest))
        if item.get("content"):
            blob = next(blobs, None)
            if blob is None or hashlib.sha256(blob).hexdigest() != digest or len(blob) != size:
                raise WorkerProtocolError("file content does not match its digest")
            data[path] = blob
    return tuple(infos), data


def build_result(
    outcome: Outcome,
    capture: Capture,
    limits: Limits,
    *,
    report: dict[str, Any] | None = None,
    contents: list[bytes] | None = None,
    message: str = "",
    **timing: Any,
) -> ExecutionResult:
    """Fit the captured channels and, when the worker reported, validate what it said.

    Raises:
        WorkerProtocolError: the report is malformed (the caller maps it to worker_error).
    """
    result_bundle: dict[str, Any] = {}
    error: ErrorInfo | None = None
    display: tuple[dict[str, Any], ...] = ()
    files: tuple[FileInfo, ...] = ()
    file_data: dict[str, bytes] = {}
    result_fitter = StreamFitter(limits.output_chars)
    if report is not None:
        raw_result = report.get("result", "")
        if raw_result != "":
            result_bundle = _str_dict(raw_result, "result")
            plain = result_bundle.get("text/plain", "")
            result_fitter.feed_text(plain if isinstance(plain, str) else str(plain))
        raw_error = report.get("error")
        if raw_error is not None:
            err = _str_dict(raw_error, "error")
            error = ErrorInfo(
                str(err.get("type", "")), str(err.get("message", "")), str(err.get("traceback", ""))
            )
        raw_display = report.get("display", [])
        if not isinstance(raw_display, list) or len(raw_display) > limits.max_display:
            raise WorkerProtocolError("bad display list")
        display = tuple(_str_dict(d, "display entry") for d in raw_display)
        if sum(len(str(v)) for d in display for v in d.values()) > limits.display_bytes * 2:
            raise WorkerProtocolError("display exceeds its bound")
        files, file_data = _files(report, contents or [], limits)
        usage = report.get("usage")
        if isinstance(usage, dict):
            cpu, rss = usage.get("cpu_ms"), usage.get("peak_rss_kb")
            if isinstance(cpu, int | float) and isinstance(rss, int) and cpu >= 0 and rss >= 0:
                timing.setdefault("cpu_ms", float(cpu))
                timing.setdefault("peak_rss_kb", rss)
        if error is not None and outcome == "ok":
            outcome = "memory_limit" if error.type == "MemoryError" else "python_error"
    if message and outcome not in ("ok", "python_error"):
        # A model reading only stderr must still tell a timeout from a silent failure; fed as
        # output, the note lands in the kept tail and within both bounds.
        capture.stderr.append_line(f"[corral] {message}")
    fitted = fit_channels(
        {
            "stdout": capture.stdout.finish(),
            "stderr": capture.stderr.finish(),
            "result": result_fitter.finish(),
        },
        limits.output_chars,
        limits.output_bytes,
    )
    result: MimeBundle | Literal[""] = ""
    if result_bundle:
        html = result_bundle.get("text/html")
        result = {k: v for k, v in result_bundle.items() if k != "text/html"}
        result["text/plain"] = fitted["result"][0]
        if isinstance(html, str) and len(html) <= limits.output_chars:
            result["text/html"] = html
    omitted = Omitted(
        stdout=fitted["stdout"][1], stderr=fitted["stderr"][1], result=fitted["result"][1]
    )
    stderr = fitted["stderr"][0]
    return ExecutionResult(
        outcome=outcome,
        stdout=fitted["stdout"][0],
        stderr=stderr,
        result=result,
        display=display,
        files=files,
        omitted=omitted,
        error=error,
        message=message,
        file_contents=file_data,
        **timing,
    )
