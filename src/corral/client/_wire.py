"""What travels between the client and corral's HTTP API: results, errors, NDJSON lines.

No I/O here: the sync and async clients share every decision, and only send and receive.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx

from corral.engine import ErrorInfo, Evidence, ExecutionResult, FileInfo, InputEvidence, Omitted
from corral.errors import (
    Busy,
    FileTooLarge,
    InvalidRequest,
    RemoteAuthError,
    RemoteStatusError,
    RemoteTimeout,
    RemoteUnavailable,
    RemoteUnreadable,
    SessionNotFound,
)

__all__ = [
    "OPS",
    "RemoteFile",
    "TextSink",
    "error_for",
    "execute_body",
    "parse_result",
    "raise_for_status",
    "read_line",
    "retry_delay",
    "transport_error",
]

OPS = "/v1/ops/code_interpreter"
MAX_RETRY_WAIT = 5.0  # seconds: a longer Retry-After is not worth blocking a caller for
DEFAULT_RETRY_WAIT = 1.0  # seconds, when a busy answer names no Retry-After
_MESSAGE_CHARS = 2000  # of an error body kept in the exception
_FILE_NOT_FOUND = "File not found"

TextSink = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """A file in a remote session's folder."""

    path: str
    size: int


def execute_body(
    code: str,
    *,
    session_id: str | None,
    timeout: float | None,
    stream: bool,
    return_files: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code}
    if session_id is not None:
        body["sessionId"] = session_id
    if timeout is not None:
        body["timeout"] = timeout
    if stream:
        body["stream"] = True
    if return_files:
        body["return_files"] = True
    return body


def _unreadable(what: str) -> NoReturn:
    raise RemoteUnreadable(f"corral answered an unreadable {what}")


def parse_result(data: Any) -> ExecutionResult:
    """The engine's ``ExecutionResult`` from its JSON shape (``ExecutionResult.as_dict``).

    Raises:
        RemoteUnreadable: the body is not that shape.
    """
    try:
        contents: dict[str, bytes] = {}
        files = []
        for item in data["files"]:
            files.append(FileInfo(str(item["path"]), int(item["size"]), str(item["sha256"])))
            encoded = item.get("content_base64")
            if isinstance(encoded, str):
                contents[files[-1].path] = base64.b64decode(encoded, validate=True)
        error = data.get("error")
        evidence = data.get("evidence")
        omitted = data["omitted"]
        return ExecutionResult(
            outcome=data["outcome"],
            stdout=str(data["stdout"]),
            stderr=str(data["stderr"]),
            result=dict(data["result"]) if data["result"] else "",
            display=tuple(dict(d) for d in data["display"]),
            files=tuple(files),
            omitted=Omitted(
                stdout=int(omitted["stdout"]),
                stderr=int(omitted["stderr"]),
                result=int(omitted["result"]),
            ),
            error=None if error is None else ErrorInfo(**error),
            elapsed_ms=float(data["elapsed_ms"]),
            queued_ms=float(data["queued_ms"]),
            cpu_ms=data.get("cpu_ms"),
            peak_rss_kb=data.get("peak_rss_kb"),
            restarted=bool(data.get("restarted", False)),
            message=str(data.get("message", "")),
            evidence=None if evidence is None else _evidence(evidence),
            file_contents=contents,
        )
    except (KeyError, TypeError, ValueError, binascii.Error):
        _unreadable("result")


def _evidence(data: Mapping[str, Any]) -> Evidence:
    return Evidence(
        code_sha256=str(data["code_sha256"]),
        runtime=str(data["runtime"]),
        inputs=tuple(InputEvidence(**item) for item in data["inputs"]),
        limits=dict(data["limits"]),
        isolation=str(data["isolation"]),
    )


def _message_and_field(response: httpx.Response, text: str) -> tuple[str, str | None]:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:_MESSAGE_CHARS], None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        error = data["error"]
        return str(error.get("message", ""))[:_MESSAGE_CHARS], error.get("field")
    if isinstance(data, dict) and "detail" in data:
        return str(data["detail"])[:_MESSAGE_CHARS], None
    return text[:_MESSAGE_CHARS], None


def retry_delay(response: httpx.Response) -> float:
    """Seconds to wait before retrying a busy answer (its ``Retry-After``, bounded)."""
    try:
        wait = float(response.headers.get("retry-after", DEFAULT_RETRY_WAIT))
    except ValueError:
        wait = DEFAULT_RETRY_WAIT
    return min(max(wait, 0.0), MAX_RETRY_WAIT)


def is_busy(response: httpx.Response) -> bool:
    """An explicit busy answer: 503 with ``Retry-After`` (the only one worth a retry)."""
    return response.status_code == 503 and "retry-after" in response.headers


def error_for(response: httpx.Response, text: str) -> Exception:
    """The corral.errors exception for an error answer."""
    status = response.status_code
    message, field = _message_and_field(response, text)
    if status in (401, 403):
        return RemoteAuthError(status, message)
    if status == 404 and message.startswith(_FILE_NOT_FOUND):
        return FileNotFoundError(message)  # as the engine's Session.get_file says it
    if status == 404:
        return SessionNotFound(message)
    if status in (400, 422):
        return InvalidRequest(status, message, field=field)
    if status == 413:
        return FileTooLarge(message)
    if is_busy(response):
        return Busy(message, retry_after=retry_delay(response))
    return RemoteStatusError(status, message)


def raise_for_status(response: httpx.Response) -> None:
    """Raise the corral error of a read (non-streamed) error answer."""
    if response.is_success:
        return
    raise error_for(response, response.text)


def transport_error(exc: httpx.HTTPError) -> Exception:
    """A failure below HTTP as a corral error."""
    if isinstance(exc, httpx.TimeoutException):
        return RemoteTimeout(f"corral did not answer in time: {exc}")
    if isinstance(exc, httpx.TransportError):
        return RemoteUnavailable(f"corral could not be reached: {exc}")
    return RemoteUnreadable(f"corral's answer could not be read: {exc}")


def read_line(
    line: str, on_stdout: TextSink | None, on_stderr: TextSink | None
) -> ExecutionResult | None:
    """Act on one NDJSON line; the result when it is the last one.

    Raises:
        SessionNotFound, RemoteStatusError: the stream ended with an error line.
        RemoteUnreadable: the line is not one of the stream's objects.
    """
    try:
        event = json.loads(line)
        kind = event["type"]
    except (ValueError, KeyError, TypeError):
        _unreadable("stream line")
    if kind == "stdout" and on_stdout is not None:
        on_stdout(str(event.get("text", "")))
    elif kind == "stderr" and on_stderr is not None:
        on_stderr(str(event.get("text", "")))
    elif kind == "result":
        return parse_result(event.get("result"))
    elif kind == "error":
        error = event.get("error") or {}
        message = str(error.get("message", ""))[:_MESSAGE_CHARS]
        if error.get("type") == "not_found":
            raise SessionNotFound(message)
        raise RemoteStatusError(500, message)
    return None


def busy_result(result: ExecutionResult) -> Busy | None:
    """A streamed ``busy`` result as the error a caller retries on (it never ran)."""
    if result.outcome != "busy":
        return None
    return Busy(result.message or "busy", retry_after=DEFAULT_RETRY_WAIT)
