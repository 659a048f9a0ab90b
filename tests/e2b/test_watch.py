"""The engine's side of E2B's watchers, on lines anything in the sandbox may have written:
only whole, short JSON objects of the watcher's shape count, and what one keeps is bounded.
(The watcher itself, with the real SDK and a real sandbox: test_sdk.py.)"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from corral.e2b._watch import MAX_EVENTS, MAX_HELD_CHARS, Watcher, _event, _lines

pytestmark = pytest.mark.anyio


class _Output:
    """What a watcher's process printed, chunk by chunk."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    async def read(self, channel: str) -> bytes:
        assert channel == "stdout"
        return self._chunks.pop(0) if self._chunks else b""


async def _parsed(*chunks: bytes) -> list[dict[str, Any]]:
    return [line async for line in _lines(cast(Any, _Output(*chunks)))]


async def test_hostile_lines_are_dropped_and_the_next_good_one_counts() -> None:
    good = json.dumps({"name": "a.txt", "type": "EVENT_TYPE_CREATE"}).encode()
    deep = b"[" * 100_000 + b"\n"  # past the parser's recursion
    long = b'{"name": "' + b"x" * 9000 + b'", "type": "EVENT_TYPE_CREATE"}\n'  # whole, too long
    lines = await _parsed(deep, long, b"not json\n", b"[1, 2]\n", good[:5], good[5:] + b"\n")
    assert lines == [{"name": "a.txt", "type": "EVENT_TYPE_CREATE"}]


def test_an_event_has_a_string_name_and_one_of_envds_types() -> None:
    assert _event({"name": "a", "type": "EVENT_TYPE_WRITE"}) == {
        "name": "a",
        "type": "EVENT_TYPE_WRITE",
    }
    for line in (
        {"name": "a", "type": ["EVENT_TYPE_WRITE"]},  # unhashable: no TypeError either
        {"name": "a", "type": "EVENT_TYPE_BOGUS"},
        {"name": 1, "type": "EVENT_TYPE_WRITE"},
        {"name": "a\0b", "type": "EVENT_TYPE_WRITE"},
    ):
        assert _event(line) is None, line


async def test_a_watcher_keeps_a_bounded_count_and_size_of_events() -> None:
    watcher = Watcher(cast(Any, None))
    for i in range(MAX_EVENTS + 5):
        watcher.keep({"name": f"f{i}", "type": "EVENT_TYPE_CREATE"})
    assert len(watcher.events) == MAX_EVENTS
    assert watcher.events[0]["name"] == "f5"  # the oldest went first
    big = "n" * 4000
    for _ in range(MAX_HELD_CHARS // 4000 + 10):
        watcher.keep({"name": big, "type": "EVENT_TYPE_WRITE"})
    assert watcher.held <= MAX_HELD_CHARS
    assert watcher.held == sum(len(e["name"]) for e in watcher.events)
    kept = len(watcher.events)
    assert len(watcher.take()) == kept
    assert (len(watcher.events), watcher.held) == (0, 0)
