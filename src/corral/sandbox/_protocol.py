"""The typed, bounded protocol between the engine and a worker.

A frame is a 4-byte big-endian length, a 1-byte kind (``J`` for a JSON object, ``B`` for raw
file bytes) and the payload. Every message is one of the dataclasses below; its ``"t"`` names
it on the wire. The engine sends a ``RunRequest``; the worker answers ``Ready`` (once, with
its inputs descriptor), then per request ``Started``, any number of ``Display`` bundles while
the code runs, ``Done``, and one ``B`` frame for each file ``Done`` says has content.

The worker side is synchronous, standard library only (it runs inside the sandbox, on the
hot path). The engine side treats every frame as untrusted: user code shares the worker's
process and can write to the socket itself. ``decode_message`` checks shape and types;
``_reader.RunReader`` checks sizes and counts against the run's limits as frames arrive.
"""

from __future__ import annotations

import os
import re
import struct
from base64 import b64decode, b64encode
from dataclasses import dataclass
from json import JSONEncoder, loads
from typing import Any

from corral.errors import WorkerProtocolError
from corral.sandbox._syscalls import write_all

__all__ = [
    "MAX_CONTROL_FRAME",
    "MAX_JSON_NODES",
    "MAX_REPORTED_PATH",
    "MAX_REQUEST",
    "Display",
    "Done",
    "ErrorReport",
    "FileReport",
    "FittedText",
    "InputSpec",
    "Ready",
    "RunLimits",
    "RunRequest",
    "Started",
    "Usage",
    "WorkerMessage",
    "check_bundle",
    "decode_message",
    "decode_request",
    "encode_bytes",
    "encode_json",
    "encode_message",
    "json_nodes",
    "read_frame_sync",
    "report_bound",
    "write_frames_sync",
]

HEADER = struct.Struct(">IB")
# Bound once, at import: user code shares the worker's modules and may replace json.dumps.
_encode = JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
MAX_CONTROL_FRAME = 64 * 1024
"""Bytes of a frame that carries no output (ready, started, a request's metadata)."""
MAX_REQUEST = 64 * 1024 * 1024
"""Bytes of a request frame a worker reads; code is bounded far below this by the engine."""
MAX_JSON_NODES = 100_000
"""JSON values (containers and scalars) per run, all frames together: decoded, each costs the
server up to ~100 bytes whatever its size on the wire, so this bounds the inflation."""
MAX_REPORTED_PATH = 4096
"""Characters of a reported file path (escaped); deeper files are counted, not listed."""
MAX_CHAR_BYTES = 7
"""Wire bytes one character may take: a lone surrogate escapes to ``\\\\udXXX``."""
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_SURROGATE = re.compile("[\ud800-\udfff]")
_DONE_OVERHEAD = 64 * 1024  # bytes for keys, numbers and the short fields of a Done frame
_FILE_OVERHEAD = 256  # bytes per file entry besides its path
_EXIT_CODE_BOUND = 1 << 31  # a sys.exit status beyond a C int is no exit status


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLimits:
    """The part of ``Limits`` a worker enforces or fits to, resolved for one request."""

    memory_bytes: int
    cpu_seconds: int
    pids: int
    file_bytes: int
    open_files: int
    max_files: int
    max_file_bytes: int
    max_display: int
    display_bytes: int
    output_chars: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InputSpec:
    id: str
    media_type: str
    original: bool
    name: str = ""
    """The source's base name, under which it also appears in the working folder."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    code: str
    limits: RunLimits
    inputs: tuple[InputSpec, ...] = ()
    argv: tuple[str, ...] | None = None
    """``sys.argv`` for the code; ``("-c",)`` when None."""
    cwd: str | None = None
    """A session run's working directory (``/home/user`` for E2B); the session folder when
    None. The folder the run's files are reported from does not change."""
    stdin: bytes | None = None
    """A one-shot run's standard input, then EOF; None: EOF at once."""
    files: tuple[tuple[str, bytes], ...] = ()
    """(relative path, content) written into a one-shot run's working folder first."""


@dataclass(frozen=True, slots=True)
class Ready:
    pass


@dataclass(frozen=True, slots=True)
class Started:
    pass


@dataclass(frozen=True, slots=True)
class Display:
    """One display bundle, fitted by the worker, sent while the code runs."""

    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FittedText:
    """A text fitted to a ceiling: kept head and tail, and the exact characters between."""

    head: str
    tail: str = ""
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class ErrorReport:
    type: str
    message: str
    traceback: str


@dataclass(frozen=True, slots=True)
class FileReport:
    path: str
    size: int
    sha256: str
    content: bool


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_ms: float
    peak_rss_kb: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """The end of one request: the cell's result and error, the files, resource use."""

    result: dict[str, Any] | None = None
    """The trailing expression's MIME bundle without ``text/plain``, which is ``plain``."""
    plain: FittedText | None = None
    error: ErrorReport | None = None
    display_omitted: int = 0
    files: tuple[FileReport, ...] = ()
    files_omitted: int = 0
    exit_code: int | None = None
    """What the code passed to ``sys.exit``, when it called it."""
    usage: Usage = Usage(0.0, 0)


WorkerMessage = Ready | Started | Display | Done


def report_bound(limits: RunLimits) -> int:
    """The largest ``Done`` frame a worker fitting to ``limits`` can send, in bytes."""
    chars = 2 * limits.output_chars + 3 * (limits.output_chars + 64)  # result, error fields
    paths = limits.max_files * (MAX_REPORTED_PATH * MAX_CHAR_BYTES + _FILE_OVERHEAD)
    return _DONE_OVERHEAD + MAX_CHAR_BYTES * chars + paths + limits.display_bytes


def _rough_nodes(payload: bytes) -> int:
    return payload.count(b",") + payload.count(b"[") + payload.count(b"{") + 1


def json_nodes(payload: bytes, budget: int = MAX_JSON_NODES) -> int:
    """An upper bound on the JSON values in ``payload``, exact enough to compare to ``budget``.

    Separators and openers are counted; only when that rough count is over the budget are
    they counted again outside strings (a long text with many commas is a single value).
    """
    rough = _rough_nodes(payload)
    if rough <= budget:
        return rough
    return _rough_nodes(_STRING.sub(b'""', payload))


# encoding (both sides) -----------------------------------------------------------------------


def _frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(len(payload), kind) + payload


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\\\u{ord(match.group()):04x}"


def encode_json(message: dict[str, Any]) -> bytes:
    text = _encode(message)
    try:
        payload = text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (user data, an undecodable name) arrives as the text "\\udXXX":
        # it must neither crash the encoder nor reach the engine as a surrogate.
        payload = _SURROGATE.sub(_escape_surrogate, text).encode()
    return _frame(ord("J"), payload)


def encode_bytes(data: bytes) -> bytes:
    return _frame(ord("B"), data)


def _text(value: FittedText | None) -> list[Any] | None:
    return None if value is None else [value.head, value.tail, value.dropped]


def encode_message(message: WorkerMessage | RunRequest) -> bytes:
    """The frame for ``message``, built by hand: ``dataclasses.asdict`` costs too much here."""
    if isinstance(message, Display):
        return encode_json({"t": "display", "data": message.data})
    if isinstance(message, Done):
        error = message.error
        return encode_json(
            {
                "t": "done",
                "result": message.result,
                "plain": _text(message.plain),
                "error": None if error is None else [error.type, error.message, error.traceback],
                "display_omitted": message.display_omitted,
                "files": [[f.path, f.size, f.sha256, f.content] for f in message.files],
                "files_omitted": message.files_omitted,
                "exit_code": message.exit_code,
                "usage": [message.usage.cpu_ms, message.usage.peak_rss_kb],
            }
        )
    if isinstance(message, RunRequest):
        limits = message.limits
        request: dict[str, Any] = {
            "t": "run",
            "code": message.code,
            "limits": {name: getattr(limits, name) for name in RunLimits.__slots__},
            "inputs": [[i.id, i.media_type, i.original, i.name] for i in message.inputs],
            "argv": None if message.argv is None else list(message.argv),
            "cwd": message.cwd,
        }
        if message.stdin is not None:
            request["stdin"] = b64encode(message.stdin).decode("ascii")
        if message.files:
            request["files"] = [[p, b64encode(d).decode("ascii")] for p, d in message.files]
        return encode_json(request)
    return encode_json({"t": "ready" if isinstance(message, Ready) else "started"})


# decoding ------------------------------------------------------------------------------------


def _load(payload: bytes) -> dict[str, Any]:
    try:
        message = loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WorkerProtocolError(f"malformed JSON frame: {exc}") from None
    if not isinstance(message, dict):
        raise WorkerProtocolError("JSON frame is not an object")
    return message


def decode_request(payload: bytes) -> RunRequest:
    """The worker's side: a request from the engine (trusted, but still checked for shape)."""
    raw = _load(payload)
    limits = raw["limits"]
    stdin = raw.get("stdin")
    return RunRequest(
        code=str(raw["code"]),
        limits=RunLimits(**{name: int(limits[name]) for name in RunLimits.__slots__}),
        inputs=tuple(
            InputSpec(id=str(i), media_type=str(m), original=bool(o), name=str(n))
            for i, m, o, n in raw["inputs"]
        ),
        argv=None if raw.get("argv") is None else tuple(str(a) for a in raw["argv"]),
        cwd=None if raw.get("cwd") is None else str(raw["cwd"]),
        stdin=None if stdin is None else b64decode(stdin),
        files=tuple((str(p), b64decode(d)) for p, d in raw.get("files", ())),
    )


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
        raise WorkerProtocolError(f"{what} is not a count")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise WorkerProtocolError(f"{what} is not text")
    return value


def _list(value: Any, length: int, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) != length:
        raise WorkerProtocolError(f"{what} is malformed")
    return value


def check_bundle(value: Any, what: str) -> dict[str, Any]:
    """Check a MIME bundle's shape: text keys; values checked against limits by the reader."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WorkerProtocolError(f"{what} is not a MIME bundle")
    return value


def _done(raw: dict[str, Any]) -> Done:
    plain = raw.get("plain")
    fitted = None
    if plain is not None:
        head, tail, dropped = _list(plain, 3, "result text")
        fitted = FittedText(_str(head, "result"), _str(tail, "result"), _int(dropped, "omitted"))
    error = raw.get("error")
    report = None
    if error is not None:
        kind, message, trace = _list(error, 3, "error")
        report = ErrorReport(_str(kind, "error"), _str(message, "error"), _str(trace, "error"))
    files = raw.get("files")
    if not isinstance(files, list):
        raise WorkerProtocolError("file list is malformed")
    entries: list[FileReport] = []
    for item in files:
        path, size, digest, content = _list(item, 4, "file entry")
        if not isinstance(content, bool):
            raise WorkerProtocolError("file entry is malformed")
        entries.append(
            FileReport(_str(path, "path"), _int(size, "size"), _str(digest, "digest"), content)
        )
    cpu, rss = _list(raw.get("usage"), 2, "usage")
    if isinstance(cpu, bool) or not isinstance(cpu, int | float) or not 0 <= cpu < 1e15:
        raise WorkerProtocolError("usage is malformed")
    result = raw.get("result")
    exit_code = raw.get("exit_code")
    if exit_code is not None and (
        isinstance(exit_code, bool)
        or not isinstance(exit_code, int)
        or not -_EXIT_CODE_BOUND <= exit_code < _EXIT_CODE_BOUND
    ):
        raise WorkerProtocolError("exit code is malformed")
    return Done(
        result=None if result is None else check_bundle(result, "result"),
        plain=fitted,
        error=report,
        display_omitted=_int(raw.get("display_omitted"), "display omitted"),
        files=tuple(entries),
        files_omitted=_int(raw.get("files_omitted"), "files omitted"),
        exit_code=exit_code,
        usage=Usage(float(cpu), _int(rss, "peak RSS")),
    )


def decode_message(payload: bytes) -> WorkerMessage:
    """The engine's side: one JSON frame from a worker, checked for shape and types.

    Raises:
        WorkerProtocolError: it is malformed or of an unknown type.
    """
    raw = _load(payload)
    kind = raw.get("t")
    if kind == "display":
        return Display(check_bundle(raw.get("data"), "display bundle"))
    if kind == "done":
        try:
            return _done(raw)
        except (TypeError, ValueError) as exc:  # unpacking a list of the wrong length
            raise WorkerProtocolError(f"malformed report: {exc}") from None
    if kind == "started":
        return Started()
    if kind == "ready":
        return Ready()
    raise WorkerProtocolError(f"unknown message {kind!r}"[:200])


# the worker's blocking I/O -------------------------------------------------------------------


def write_frames_sync(fd: int, *frames: bytes) -> None:
    write_all(fd, b"".join(frames))


def _read_exact(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the protocol socket")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame_sync(fd: int, max_size: int) -> bytes:
    """Read one JSON frame's payload from a blocking fd.

    Raises:
        EOFError: the peer closed the socket.
        WorkerProtocolError: the frame is oversized or not JSON.
    """
    size, kind = HEADER.unpack(_read_exact(fd, HEADER.size))
    if size > max_size:
        raise WorkerProtocolError(f"frame of {size} bytes exceeds {max_size}")
    if kind != ord("J"):
        raise WorkerProtocolError("expected a JSON frame")
    return _read_exact(fd, size)
