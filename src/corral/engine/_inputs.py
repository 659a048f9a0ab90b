"""What a run may mount under ``/inputs`` and the metadata-only events it reports."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from corral._mime import TEXT_PLAIN

__all__ = ["Input", "RunEvent", "RunEventSink"]

_NAME_BYTES = 255  # a base name longer than this cannot be created on Linux


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """One source mounted read-only into a worker.

    The canonical text appears at ``/inputs/<id>.txt``; the original bytes, when given, at
    ``/inputs/<id>.orig``. With a ``name``, the working folder also shows the source under
    that base name, read-only (the original bytes when there are any, else the text).
    Python sees ``input_files`` (``{id: text path}``) and ``input_assets``
    (``{id: {"text", "original", "media_type", "name"}}``).
    """

    id: str
    text: bytes
    original: bytes | None = None
    media_type: str = TEXT_PLAIN
    text_sha256: str = field(default="")
    original_sha256: str | None = None
    name: str = ""
    """The source's own base name (``scores.csv``); "" for none."""

    def __post_init__(self) -> None:
        if not self.id or not all(c.isalnum() or c in "-_" for c in self.id):
            raise ValueError(f"input id must be [A-Za-z0-9_-]+, not {self.id!r}")
        if self.name and not is_base_name(self.name):
            raise ValueError(f"input name must be a plain file name, not {self.name!r}")
        if not self.text_sha256:
            object.__setattr__(self, "text_sha256", hashlib.sha256(self.text).hexdigest())
        if self.original is not None and self.original_sha256 is None:
            object.__setattr__(self, "original_sha256", hashlib.sha256(self.original).hexdigest())


def is_base_name(name: str) -> bool:
    """A name that is one path component, printable, and creatable on Linux."""
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and name.isprintable()
        and len(name.encode("utf-8", "surrogatepass")) <= _NAME_BYTES
        and not any(0xD800 <= ord(c) <= 0xDFFF for c in name)
    )


Phase = Literal["queued", "started", "executing", "finished"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """A metadata-only lifecycle event: never code, output, names, paths or error text."""

    phase: Phase
    elapsed_ms: float
    outcome: str | None = None
    stdout_chars: int | None = None
    stderr_chars: int | None = None
    result_chars: int | None = None
    omitted_chars: int | None = None
    display_count: int | None = None
    file_count: int | None = None


RunEventSink = Callable[[RunEvent], None]
