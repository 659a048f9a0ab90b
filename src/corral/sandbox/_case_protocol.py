"""The control messages of a case server: one program, many cases (``/run_code_batch``).

A case server is a fresh one-shot worker asked, instead of a ``RunRequest``, to serve
``CasesRequest``: it compiles the code once, then runs each case in a plain child it forks.
Per case the engine sends ``CaseStart`` with three descriptors (the child's protocol socket,
stdout and stderr write ends) and, once the case is over for it, ``CaseStop``; the server
answers ``CaseEnded`` when every process of the case is gone and the working folders are
restored. The case's own frames (``Started``, ``Display``, ``Done``, file contents) travel on
the case's socket, read by the same bounded reader as any run.

A program in another language is served as a ``Launch``: the server runs no Python per case,
it reads the case's request itself, writes its files, spawns the program
(``corral.sandbox.inside._exec_case``) and reports the run when the program exits, as the
Python driver of a fresh run of it would have.

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
    "HEAP_MB",
    "CaseEnded",
    "CaseStart",
    "CaseStop",
    "CasesRequest",
    "Launch",
    "decode_cases_request",
    "decode_ended",
    "decode_server_command",
    "encode_case_message",
]

CASE_FDS = 3
"""Descriptors that come with a ``CaseStart``: protocol socket, stdout, stderr (in order)."""


_PAIR = 2  # an environment entry: name, value
HEAP_MB = "{heap_mb}"
"""In a ``Launch``'s argv: the MiB of heap a JVM may take, from the address space the case may
still map (its ``RLIMIT_AS`` less what is mapped when it execs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """How a case server starts a program that is not Python: exec'd in each case's child.

    The case's request brings the program's files, as for a fresh run of its driver.
    """

    argv: tuple[str, ...]
    """The command; the request's ``argv`` past its first item is appended."""
    env: tuple[tuple[str, str], ...] = ()
    """Set on top of the worker's environment."""
    executables: tuple[str, ...] = ()
    """Files of the request made executable (0755) before the exec."""
    artifact: tuple[str, ...] = ()
    """Files of the request removed once the program has exited: a run reports only what the
    program wrote."""
    heap_overhead_mb: int = 0
    """Address space a JVM maps besides its heap, taken off ``HEAP_MB``."""


@dataclass(frozen=True, slots=True)
class CasesRequest:
    """Engine to worker: become a case server for ``code`` (or for ``launch``, whose cases
    exec it: ``code`` is then only what names the program)."""

    code: str
    launch: Launch | None = None


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
        frame: dict[str, Any] = {"t": "cases", "code": message.code}
        if (launch := message.launch) is not None:
            frame["launch"] = {
                "argv": list(launch.argv),
                "env": [list(pair) for pair in launch.env],
                "executables": list(launch.executables),
                "artifact": list(launch.artifact),
                "heap_overhead_mb": launch.heap_overhead_mb,
            }
        return encode_json(frame)
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
    if "launch" not in raw:
        return CasesRequest(raw["code"])
    launch = _launch(raw["launch"])
    return None if launch is None else CasesRequest(raw["code"], launch)


def _strings(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    return tuple(value)


def _launch(raw: object) -> Launch | None:
    if not isinstance(raw, dict):
        return None
    argv = _strings(raw.get("argv"))
    executables = _strings(raw.get("executables"))
    artifact = _strings(raw.get("artifact"))
    env = raw.get("env")
    overhead = raw.get("heap_overhead_mb")
    if not argv or executables is None or artifact is None or not isinstance(env, list):
        return None
    pairs = [_strings(pair) for pair in env]
    if any(pair is None or len(pair) != _PAIR for pair in pairs):
        return None
    if not isinstance(overhead, int) or isinstance(overhead, bool) or overhead < 0:
        return None
    return Launch(
        argv=argv,
        env=tuple((pair[0], pair[1]) for pair in pairs if pair is not None),
        executables=executables,
        artifact=artifact,
        heap_overhead_mb=overhead,
    )


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
