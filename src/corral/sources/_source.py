"""A registered source: canonical text, original bytes, digests and metadata."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Literal, TypedDict

__all__ = ["Source", "SourceInfo", "SourceKind"]

SourceKind = Literal["attachment", "read_source"]


class SourceInfo(TypedDict):
    """A source's metadata, JSON-ready, without its bytes."""

    id: str
    kind: SourceKind
    filename: str
    media_type: str
    text_bytes: int
    original_bytes: int | None
    text_sha256: str
    original_sha256: str | None
    created_at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """A registered representation: canonical text, and the original bytes of attachments.

    Attributes:
        id: the opaque id the model passes back; meaningful only in its own registry.
        kind: ``"attachment"`` (ingested request attachment) or ``"read_source"``.
        filename: display name (directories stripped); never used as a path.
        media_type: the detected media type of the original (or of the text).
        text: canonical UTF-8 text.
        original: the attachment's bytes, or None for texts other tools produced.
        text_sha256: hex digest of ``text``.
        original_sha256: hex digest of ``original``, or None.
        created_at: when it was registered (UTC).
    """

    id: str
    kind: SourceKind
    filename: str
    media_type: str
    text: bytes = field(repr=False)
    original: bytes | None = field(repr=False)
    text_sha256: str
    original_sha256: str | None
    created_at: datetime.datetime

    @property
    def size(self) -> int:
        """Bytes this source holds: text plus original."""
        return len(self.text) + (len(self.original) if self.original is not None else 0)

    def info(self) -> SourceInfo:
        """Metadata for listings and tool results; no content."""
        return SourceInfo(
            id=self.id,
            kind=self.kind,
            filename=self.filename,
            media_type=self.media_type,
            text_bytes=len(self.text),
            original_bytes=len(self.original) if self.original is not None else None,
            text_sha256=self.text_sha256,
            original_sha256=self.original_sha256,
            created_at=self.created_at.isoformat(),
        )
