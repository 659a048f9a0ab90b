"""Batch input lines and output records.

An input line is ``{"id", "code", "stdin"?, "timeout"?, "language"?}`` (``language``: a
SandboxFusion name the engine serves, ``python`` by default); an output record is ``{"id", ...the
full ExecutionResult..., "node"}``. A line that is not such an object still gets a record, with
outcome ``invalid_input`` and the reason, so one bad line never aborts a batch.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from corral._limits import Limits
from corral.engine import LANGUAGE_NAMES, ExecutionResult

__all__ = [
    "BatchItem",
    "Record",
    "Unreadable",
    "host_name",
    "invalid_record",
    "parse_item",
    "read_jsonl",
    "record_for",
]

Record = dict[str, Any]
"""One output line: the item's id, the full result, and the node that ran it."""

_ID_TYPES = (str, int)
_FIELDS = frozenset({"id", "code", "stdin", "timeout", "language"})


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchItem:
    """One run of a batch."""

    id: str | int
    code: str
    stdin: str | None = None
    """Standard input, then EOF; None: EOF at once."""
    timeout: float | None = None
    """Seconds for this run (its own running time, not its wait); None: the engine's."""
    language: str = "python"
    """The program's language (``Engine.languages`` says which are served)."""

    def limits(self, base: Limits) -> Limits:
        return base if self.timeout is None else base.replace(timeout=self.timeout)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "code": self.code,
            "stdin": self.stdin,
            "timeout": self.timeout,
        }
        if self.language != "python":
            data["language"] = self.language
        return data


def parse_item(raw: Any) -> BatchItem | str:
    """``raw`` (a decoded JSON line, a mapping or a BatchItem) as an item, or why it is not one."""
    if isinstance(raw, BatchItem):
        return raw
    if isinstance(raw, Unreadable):
        return raw.reason
    if not isinstance(raw, Mapping):
        return "a line must be a JSON object with id and code"
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        return f"unknown field {unknown[0]!r} (a line has id, code, stdin, timeout, language)"
    ident, code, stdin, timeout = (raw.get(k) for k in ("id", "code", "stdin", "timeout"))
    language = raw.get("language", "python")
    if language not in LANGUAGE_NAMES and language != "python3":
        return f"language must be one of {', '.join(LANGUAGE_NAMES)}"
    if isinstance(ident, bool) or not isinstance(ident, _ID_TYPES):
        return "id must be a string or an integer"
    if not isinstance(code, str):
        return "code must be a string"
    if stdin is not None and not isinstance(stdin, str):
        return "stdin must be a string or null"
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            return "timeout must be a number of seconds"
        if not 0 < timeout < math.inf:
            return "timeout must be positive"
        timeout = float(timeout)
    return BatchItem(id=ident, code=code, stdin=stdin, timeout=timeout, language=language)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A line that is not JSON at all, in its place in the batch."""

    reason: str
    line: int
    """Its line number (from 1): a record without an id says which line it was."""


def read_jsonl(lines: Iterable[str]) -> Iterator[Any]:
    """Each non-blank line decoded, or an ``Unreadable`` saying why it could not be."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError as exc:
            yield Unreadable(f"line {number} is not JSON: {exc}", number)


def record_for(ident: Any, result: ExecutionResult, node: str) -> Record:
    return {"id": ident, **result.as_dict(), "node": node}


def invalid_record(raw: Any, reason: str, node: str | None = None) -> Record:
    """The ``invalid_input`` record of a line that could not be run."""
    ident = raw.get("id") if isinstance(raw, Mapping) else None
    if isinstance(ident, bool) or not isinstance(ident, _ID_TYPES):
        ident = None
    result = ExecutionResult(outcome="invalid_input", message=reason)
    record = record_for(ident, result, node or host_name())
    if isinstance(raw, Unreadable):
        record["line"] = raw.line
    return record


def host_name() -> str:
    return socket.gethostname()
