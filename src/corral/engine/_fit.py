"""Output fitting: bounded capture while code runs, exact omission counts afterwards.

A ``StreamFitter`` keeps at most a head and a tail of one channel, whatever the code prints,
and counts every character it drops; the server's memory stays bounded for a run printing a
gigabyte. ``fit_channels`` then applies the per-channel character ceiling and the aggregate
UTF-8 byte bound, marking each cut in the text itself so a reader cannot take a fitted channel
for a complete one.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable

__all__ = ["STREAM_CUT", "StreamFitter", "fit_channels", "marker", "render"]

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_PARTIAL_ESCAPE_MAX = 64  # characters an unterminated escape may carry over between chunks
# What a chunk may end with that could still become one escape sequence with the next chunk.
_ESCAPE_PREFIX = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?)?")


def marker(omitted: int) -> str:
    return f"\n[... {omitted} characters omitted ...]\n"


STREAM_CUT = "\n[... the rest of this output is not streamed: the result keeps its end ...]\n"
"""What a live listener sees where the head is full and streaming stops."""


class StreamFitter:
    """Decode, strip ANSI escapes and keep a bounded head and tail of one output channel."""

    def __init__(self, ceiling: int, on_head: Callable[[str], None] | None = None) -> None:
        self._on_head = on_head  # sees each piece of text joining the head: what may stream
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head_cap = ceiling
        self._tail_cap = ceiling
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self._dropped = 0
        self._carry = ""
        self._last = "\n"
        self._cut_said = False
        self.total = 0

    def feed(self, data: bytes) -> None:
        self._text(self._decoder.decode(data))

    def feed_text(self, text: str) -> None:
        self._text(text)

    def append_line(self, line: str) -> None:
        """Add ``line`` on a line of its own after whatever came before; ends the stream."""
        self._text(self._decoder.decode(b"", final=True))
        self._text(("" if self._last == "\n" else "\n") + line + "\n")

    def skip(self, count: int) -> None:
        """Count ``count`` characters cut before they arrived (the worker fitted them away);
        they sit between what came so far, which stays the head, and what follows."""
        if count:
            self.total += count
            self._dropped += count
            self._head_cap = self._head_len
            if self._on_head is not None and not self._cut_said:
                self._cut_said = True
                self._on_head(STREAM_CUT)

    def _text(self, text: str, final: bool = False) -> None:
        text = self._carry + text
        self._carry = ""
        escape = text.rfind("\x1b")
        if not final and escape != -1 and len(text) - escape <= _PARTIAL_ESCAPE_MAX:
            candidate = text[escape:]
            if _ESCAPE_PREFIX.fullmatch(candidate):
                self._carry = candidate
                text = text[:escape]
        text = _ANSI.sub("", text)
        if not text:
            return
        self._last = text[-1]
        self.total += len(text)
        room = self._head_cap - self._head_len
        if room > 0:
            self._head.append(text[:room])
            if self._on_head is not None:
                self._on_head(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text and self._on_head is not None and not self._cut_said:
            self._cut_said = True
            self._on_head(STREAM_CUT)
        if text:
            combined = self._tail + text
            excess = len(combined) - self._tail_cap
            if excess > 0:
                self._dropped += excess
                combined = combined[excess:]
            self._tail = combined

    def finish(self) -> tuple[str, str, int]:
        """Return (head, tail, characters already dropped between them)."""
        self._text(self._decoder.decode(b"", final=True), final=True)
        return "".join(self._head), self._tail, self._dropped


def _cut(begin: str, end: str, total: int, room: int) -> tuple[str, str]:
    head = begin[: min(len(begin), room // 2)]
    tail_len = min(len(end), room - len(head))
    head = begin[: min(len(begin), room - tail_len)]
    return head, end[len(end) - tail_len :] if tail_len else ""


def render(head: str, tail: str, dropped: int, max_chars: int, max_bytes: int) -> tuple[str, int]:
    """Fit one channel into ``max_chars`` characters and ``max_bytes`` UTF-8 bytes.

    Returns the text (with a marker where characters were cut) and the exact number of the
    channel's characters that are not in it.
    """
    total = len(head) + dropped + len(tail)
    begin, end = (head, tail) if dropped else (head + tail, head + tail)
    if not dropped and total <= max_chars and len(begin.encode()) <= max_bytes:
        return begin, 0

    def attempt(room: int) -> tuple[str, int] | None:
        kept_head, kept_tail = _cut(begin, end, total, room)
        omitted = total - len(kept_head) - len(kept_tail)
        text = kept_head + marker(omitted) + kept_tail
        if len(text) > max_chars or len(text.encode()) > max_bytes:
            return None
        return text, omitted

    low, high = 0, max(0, max_chars - len(marker(total)))
    best = attempt(0)
    while low <= high:
        middle = (low + high) // 2
        found = attempt(middle)
        if found is None:
            high = middle - 1
        else:
            best, low = found, middle + 1
    if best is None:  # not even a marker fits: say nothing rather than break the bound
        return "", total
    return best


def fit_channels(
    channels: dict[str, tuple[str, str, int]], max_chars: int, max_bytes: int
) -> dict[str, tuple[str, int]]:
    """Fit every channel to ``max_chars``, then share ``max_bytes`` among them.

    The byte budget is shared by water-filling: channels smaller than an equal share keep
    everything, and what they leave is split among the larger ones.
    """
    fitted = {name: render(*parts, max_chars, max_bytes) for name, parts in channels.items()}
    sizes = {name: len(text.encode()) for name, (text, _) in fitted.items()}
    if sum(sizes.values()) <= max_bytes:
        return fitted
    budget = max_bytes
    remaining = sorted(sizes, key=sizes.__getitem__)
    shares: dict[str, int] = {}
    while remaining:
        share = budget // len(remaining)
        name = remaining.pop(0)
        shares[name] = min(sizes[name], share)
        budget -= shares[name]
    result: dict[str, tuple[str, int]] = {}
    for name, parts in channels.items():
        if sizes[name] <= shares[name]:
            result[name] = fitted[name]
        else:
            result[name] = render(*parts, max_chars, shares[name])
    return result
