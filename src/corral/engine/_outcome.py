"""Turning a worker's report into an ExecutionResult: validation, fitting, typed outcomes."""

from __future__ import annotations

import hashlib
import re
from functools import partial
from typing import Any, Literal

from corral._limits import Limits
from corral._mime import TEXT_HTML, TEXT_PLAIN
from corral.engine._fit import StreamFitter, fit_channels
from corral.engine._result import ErrorInfo, ExecutionResult, FileInfo, MimeBundle, Omitted, Outcome
from corral.engine._stream import OutputTap
from corral.errors import WorkerProtocolError
from corral.sandbox import MAX_REPORTED_PATH, WorkerReport

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


def _files(report: WorkerReport) -> tuple[tuple[FileInfo, ...], dict[str, bytes]]:
    infos: list[FileInfo] = []
    data: dict[str, bytes] = {}
    blobs = iter(report.contents)
    for item in report.done.files:
        path = item.path
        if (
            not path
            or len(path) > MAX_REPORTED_PATH
            or not path.isprintable()
            or path.startswith("/")
            or {"", ".", ".."} & set(path.split("/"))
            or not _SHA256.fullmatch(item.sha256)
        ):
            raise WorkerProtocolError("bad file entry")
        infos.append(FileInfo(path, item.size, item.sha256))
        if item.content:
            blob = next(blobs, None)
            if blob is None or hashlib.sha256(blob).hexdigest() != item.sha256:
                raise WorkerProtocolError("file content does not match its digest")
            # Escaped names may coincide (b"\\xff" and a file named "\\xff"): the first wins.
            data.setdefault(path, blob)
    return tuple(infos), data


def build_result(
    outcome: Outcome,
    capture: Capture,
    limits: Limits,
    *,
    report: WorkerReport | None = None,
    message: str = "",
    **timing: Any,
) -> ExecutionResult:
    """Fit the captured channels and, when the worker reported, validate what it said.

    The reader already held the report to the run's limits; here names, digests and the
    final fitting are checked.

    Raises:
        WorkerProtocolError: the report is malformed (the caller maps it to worker_error).
    """
    result_bundle: dict[str, Any] = {}
    error: ErrorInfo | None = None
    display: tuple[dict[str, Any], ...] = ()
    files: tuple[FileInfo, ...] = ()
    file_data: dict[str, bytes] = {}
    result_fitter = StreamFitter(limits.output_chars)
    has_result = False
    if report is not None:
        done = report.done
        has_result = done.plain is not None or bool(done.result)
        result_bundle = dict(done.result or {})
        if done.plain is not None:
            result_fitter.feed_text(done.plain.head)
            result_fitter.skip(done.plain.dropped)
            result_fitter.feed_text(done.plain.tail)
        if done.error is not None:
            error = ErrorInfo(done.error.type, done.error.message, done.error.traceback)
        display = tuple(report.display)
        files, file_data = _files(report)
        if done.exit_code is not None:
            timing.setdefault("exit_code", done.exit_code)
        timing.setdefault("cpu_ms", done.usage.cpu_ms)
        timing.setdefault("peak_rss_kb", done.usage.peak_rss_kb)
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
    if has_result:
        result = {k: v for k, v in result_bundle.items() if k != TEXT_HTML}
        result[TEXT_PLAIN] = fitted["result"][0]
        html = result_bundle.get(TEXT_HTML)
        if isinstance(html, str) and len(html) <= limits.output_chars:
            result[TEXT_HTML] = html
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
