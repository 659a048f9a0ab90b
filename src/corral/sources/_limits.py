"""The size bounds of ingestion and of one invocation's source inventory."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["DEFAULT_SOURCE_LIMITS", "SourceLimits"]

_MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceLimits:
    """Bounds for ingestion and for one registry; every field is a positive integer."""

    attachment_bytes: int = 20 * _MIB
    """Largest original attachment accepted, checked before any parsing."""
    text_bytes: int = 10 * _MIB
    """Largest canonical UTF-8 text; a worksheet can expand far beyond its ZIP size."""
    unpacked_bytes: int = 200 * _MIB
    """Declared uncompressed size of all parts of one XLSX archive (zip-bomb guard)."""
    total_bytes: int = 128 * _MIB
    """Text plus original bytes one registry may hold at once."""
    max_count: int = 256
    """Sources one registry may hold at once."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"SourceLimits.{field.name} must be a positive int, not {value!r}")


DEFAULT_SOURCE_LIMITS = SourceLimits()
