"""The control messages of a case server: one program, many cases (``/run_code_batch``).

A case server is a fresh one-shot worker asked, instead of a ``RunRequest``, to serve
``CasesRequest``: it compiles the code once, then runs each case in a plain child it forks.
Per case the engine sends ``CaseStart`` with three descriptors (the child's protocol socket,
stdout and stderr write ends) and, once the case is over for it, ``CaseStop``; the server
answers ``CaseEnded`` when every process of the case is gone and the working folders are
restored. The case's own frames (``Started``, ``Display``, ``Done``, file contents) travel on
the case's socket, read by the same bounded reader as any run.

Frames are ``_protocol``'s (a length, a kind, a JSON object). The engine trusts nothing the
server says: ``decode_ended`` checks shape and types, and the frame is bounded before it is
read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from json import loads
from typing import Any

from corral.errors import WorkerProtocolError
from corral.sandbox._protocol import encode_json

__all__ = [
    "CASE_FDS",
    "CaseEnded",
    "CaseStart",
    "CaseStop",
    "CasesRequest",
    "decode_cases_request",
    "decode_ended",
    "decode_server_command",
    "encode_case_message",
]

CASE_FDS = 3
"""Descriptors that come with a ``CaseStart``: protocol socket, stdout, stderr (in order)."""


@dataclass(frozen=True, slots=True)
class CasesRequest:
    """Engine to worker: become a case server for ``code``."""

    code: str


@dataclass(frozen=True, slots=True)
class CaseStart:
    """Engine to server: run one case; kill it after ``seconds`` whatever the engine says."""

    seconds: float


@dataclass(frozen=True, slots=True)
class CaseStop:
    """Engine to server: the case is over (it reported, failed or ran out of time)."""


@dataclass(frozen=True, slots=True)
class CaseEnded:
    """Server to engine: every process of the case is gone and the folders are restored.

    ``timed_out``: the server's own timer killed the case. ``clean``: False when the folders
    could not be put back as they were; the engine then retires the server.
    """

    timed_out: bool
    clean: bool


CaseMessage = CasesRequest | CaseStart | CaseStop | CaseEnded


def encode_case_message(message: CaseMessage) -> bytes:
    """The frame for ``message``."""
    if isinstance(message, CasesRequest):
        return encode_json({"t": "cases", "code": message.code})
    if isinstance(message, CaseStart):
        return encode_json({"t": "case", "seconds": message.seconds})
    if isinstance(message, CaseStop):
        return encode_json({"t": "stop"})
    return encode_json({"t": "ended", "timed_out": message.timed_out, "clean": message.clean})


def _load(payload: bytes) -> dict[str, Any] | None:
    try:
        message = loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def decode_cases_request(payload: bytes) -> CasesRequest | None:
    """The worker's side: a ``CasesRequest``, or None if the frame is something else."""
    if b'"t":"cases"' not in payload[:16]:  # the encoder writes "t" first; a run is "run"
        return None
    raw = _load(payload)
    if raw is None or raw.get("t") != "cases" or not isinstance(raw.get("code"), str):
        return None
    return CasesRequest(raw["code"])


def decode_server_command(payload: bytes) -> CaseStart | CaseStop | None:
    """The server's side: the engine's next command, or None if it is not one."""
    raw = _load(payload)
    if raw is None:
        return None
    if raw.get("t") == "stop":
        return CaseStop()
    seconds = raw.get("seconds")
    if raw.get("t") == "case" and isinstance(seconds, int | float) and math.isfinite(seconds):
        return CaseStart(max(0.0, float(seconds)))
    return None


def decode_ended(payload: bytes) -> CaseEnded:
    """The engine's side: the server's answer to a case.

    Raises:
        WorkerProtocolError: it is not a well-formed ``CaseEnded``.
    """
    raw = _load(payload)
    if raw is None or raw.get("t") != "ended":
        raise WorkerProtocolError("the case server sent something other than ended")
    timed_out, clean = raw.get("timed_out"), raw.get("clean")
    if not isinstance(timed_out, bool) or not isinstance(clean, bool):
        raise WorkerProtocolError("the case server's ended message is malformed")
    return CaseEnded(timed_out, clean)
