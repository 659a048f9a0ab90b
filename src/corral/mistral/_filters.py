"""The per-endpoint filter for chat completions ``tools`` arrays (docs/mistral.md §4.8)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableSet
from typing import Any

__all__ = ["CHAT_SERVER_TOOLS", "filter_chat_completions_tools"]

CHAT_SERVER_TOOLS = frozenset({"connector", "image_generation"})
"""Server-tool types chat completions accepts; the rest are Conversations-only (HTTP 400, 1800)."""


def filter_chat_completions_tools(
    entries: Iterable[Mapping[str, Any]],
    warn: Callable[[str], None],
    warned: MutableSet[str] | None = None,
) -> list[dict[str, Any]]:
    """Keep ``function`` entries and the server tools chat completions accepts.

    Every other entry (``web_search``, ``web_search_premium``, ``code_interpreter``, any
    other type) is dropped and reported through ``warn``; pass one ``warned`` set per
    session so each type is reported once per session.
    """
    kept: list[dict[str, Any]] = []
    for entry in entries:
        kind = entry.get("type")
        if kind == "function" or kind in CHAT_SERVER_TOOLS:
            kept.append(dict(entry))
            continue
        label = kind if isinstance(kind, str) else "(no type)"
        if warned is not None:
            if label in warned:
                continue
            warned.add(label)
        warn(
            f"Mistral chat completions does not support the server tool '{label}' "
            "(it is Conversations-only); dropped. "
            "Use the web_search / mistral_code_interpreter tool."
        )
    return kept
