"""Fitting inside the sandbox: what the runner sends already obeys the run's ceilings.

The runner fits the trailing expression's result, the error and every display bundle before
sending, so a huge repr or an HTML flood becomes a fitted ``ok`` result with exact omission
counts instead of an oversized frame; the engine checks the same bounds again (``_reader``)
and renders the final text (``corral.engine._fit``). Standard library only: this runs in the
worker, on the hot path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from corral._mime import TEXT_PLAIN, is_textual
from corral.sandbox._protocol import (
    HEADER,
    MAX_JSON_NODES,
    Display,
    FittedText,
    encode_json,
    encode_message,
    json_nodes,
)

__all__ = ["DisplaySender", "clip", "escape_name", "fit_result", "fit_text", "valid_text"]

_DONE_NODES = 2_000  # JSON values kept back for a Done frame's own fields and file list


def _marker(omitted: int) -> str:
    # The engine's marker (corral.engine._fit.marker), which this layer may not import.
    return f"\n[... {omitted} characters omitted ...]\n"


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate spelt ``\\udXXX``, before it is measured: the wire
    would escape it anyway, and the engine measures what arrives."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def fit_text(text: str, ceiling: int) -> FittedText:
    """Keep at most ``ceiling`` characters from each end; count exactly what lies between."""
    text = valid_text(text)
    head, rest = text[:ceiling], text[ceiling:]
    if len(rest) <= ceiling:
        return FittedText(head, rest, 0)
    return FittedText(head, rest[len(rest) - ceiling :], len(rest) - ceiling)


def clip(text: str, ceiling: int) -> str:
    """``text`` within ``ceiling`` characters, a marker saying how many were cut included."""
    text = valid_text(text)
    if len(text) <= ceiling:
        return text
    keep = ceiling - len(_marker(len(text)))  # the marker for fewer cut is no longer
    if keep < 0:
        return text[:ceiling]
    head = keep // 2
    return text[:head] + _marker(len(text) - keep) + text[len(text) - (keep - head) :]


def _fit_values(
    data: dict[str, Any], ceiling: int, byte_budget: int, node_budget: int
) -> dict[str, Any]:
    """Textual values over the ceiling go (text/plain is clipped instead); others stay while
    they fit the byte and JSON-value budgets."""
    kept: dict[str, Any] = {}
    for mime, value in data.items():
        if mime == TEXT_PLAIN:
            kept[mime] = clip(value if isinstance(value, str) else str(value), ceiling)
        elif is_textual(mime):
            if isinstance(value, str) and len(value) <= ceiling:
                kept[mime] = valid_text(value)
                if len(kept[mime]) > ceiling:
                    del kept[mime]
        else:
            try:
                wire = encode_json({"v": value})
            except (TypeError, ValueError, RecursionError):  # a _repr_json_ that is not JSON
                continue
            nodes = json_nodes(wire, node_budget)
            if len(wire) <= byte_budget and nodes <= node_budget:
                kept[mime] = value
                byte_budget -= len(wire)
                node_budget -= nodes
    return kept


def fit_result(
    bundle: dict[str, Any], ceiling: int, byte_budget: int, node_budget: int
) -> tuple[dict[str, Any] | None, FittedText | None]:
    """The result bundle without ``text/plain`` (fitted), and its ``text/plain`` text."""
    rest = dict(bundle)
    plain = rest.pop(TEXT_PLAIN, None)
    fitted = (
        None
        if plain is None
        else fit_text(plain if isinstance(plain, str) else str(plain), ceiling)
    )
    others = _fit_values(rest, ceiling, byte_budget, max(0, node_budget - _DONE_NODES))
    return (others or None), fitted


def escape_name(name: str) -> str:
    """A file name as text that is valid UTF-8 and printable: undecodable bytes read
    ``\\xff``, control and format characters their escape (``\\n``, ``\\u202e``)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class DisplaySender:
    """Fits each display bundle and sends it at once, within the count and byte bounds."""

    def __init__(self) -> None:
        self.write: Callable[[bytes], None] | None = None
        self.omitted = 0
        self.nodes_left = MAX_JSON_NODES
        self._ceiling = 0
        self._left = 0
        self._bytes_left = 0

    def reset(
        self, write: Callable[[bytes], None] | None, *, max_items: int, max_bytes: int, ceiling: int
    ) -> None:
        self.write = write
        self.omitted = 0
        self.nodes_left = MAX_JSON_NODES
        self._ceiling = ceiling
        self._left = max_items
        self._bytes_left = max_bytes

    def __call__(self, data: dict[str, Any]) -> None:
        fitted = _fit_values(data, self._ceiling, self._bytes_left, self.nodes_left - _DONE_NODES)
        frame = encode_message(Display(fitted))
        size = len(frame) - HEADER.size
        nodes = json_nodes(frame[HEADER.size :], self.nodes_left)
        if (
            not fitted
            or self._left <= 0
            or size > self._bytes_left
            or nodes > self.nodes_left - _DONE_NODES
        ):
            self.omitted += 1
            return
        self._left -= 1
        self._bytes_left -= size
        self.nodes_left -= nodes
        if self.write is not None:
            self.write(frame)
