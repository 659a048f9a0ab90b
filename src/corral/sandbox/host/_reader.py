"""The engine's reader of one worker's frames, bounded by the run's own limits.

Each frame's size is checked from its header, before any of its payload is buffered, against
what the protocol allows next: a control frame before ``Started``; a display bundle within
what is left of the display budget or a ``Done`` within ``report_bound`` while the code runs;
then exactly the file sizes ``Done`` announced, within the file count and byte limits. Decoded
JSON is bounded by ``MAX_JSON_NODES`` per run. The first violation raises and the engine stops
reading, so a lying worker costs the server at most its run's limits plus a small constant.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from corral.errors import WorkerProtocolError
from corral.sandbox._protocol import (
    HEADER,
    MAX_CONTROL_FRAME,
    MAX_JSON_NODES,
    Display,
    Done,
    Ready,
    RunLimits,
    Started,
    decode_message,
    json_nodes,
    report_bound,
)

__all__ = ["FrameBuffer", "RunReader"]

_J, _B = ord("J"), ord("B")
_MARKER_ROOM = 64  # characters a fitting marker may add beyond a ceiling


class FrameBuffer:
    """Bytes received from one worker, split into frames; kept across a session's runs."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next(self, bound: Callable[[int], int]) -> tuple[int, bytes] | None:
        """The next complete frame as (kind, payload), or None until more bytes arrive.

        Raises:
            WorkerProtocolError: its header announces more than ``bound(kind)`` bytes.
        """
        if len(self._buffer) < HEADER.size:
            return None
        size, kind = HEADER.unpack_from(self._buffer)
        allowed = bound(kind)
        if size > allowed:
            what = {_J: "JSON", _B: "file"}.get(kind, f"kind {kind}")
            if allowed < 0:
                raise WorkerProtocolError(f"unexpected {what} frame")
            raise WorkerProtocolError(f"{what} frame of {size} bytes exceeds {allowed}")
        end = HEADER.size + size
        if len(self._buffer) < end:
            return None
        with memoryview(self._buffer) as view:  # one copy of a large frame, not two
            payload = bytes(view[HEADER.size : end])
        del self._buffer[:end]
        return kind, payload


def ready_bound(kind: int) -> int:
    return MAX_CONTROL_FRAME if kind == _J else -1


def expect_ready(kind: int, payload: bytes) -> None:
    if not isinstance(decode_message(payload), Ready):
        raise WorkerProtocolError("expected ready")


def _text_within(text: str, ceiling: int, what: str) -> None:
    if len(text) > ceiling:
        raise WorkerProtocolError(f"{what} exceeds its ceiling of {ceiling} characters")


class RunReader:
    """The frames of one request, checked against that request's limits as they arrive."""

    def __init__(self, limits: RunLimits, on_display: Callable[[dict[str, Any]], None]) -> None:
        self._limits = limits
        self._on_display = on_display
        self._phase = "start"
        self._display_bytes = limits.display_bytes
        self._nodes = MAX_JSON_NODES
        self._report_bound = report_bound(limits)
        self._sizes: deque[int] = deque()
        self.started = False
        self.display: list[dict[str, Any]] = []
        self.done: Done | None = None
        self.contents: list[bytes] = []

    @property
    def finished(self) -> bool:
        return self._phase == "finished"

    def bound(self, kind: int) -> int:
        """The largest frame of ``kind`` the protocol allows next, in bytes (-1: none)."""
        if self._phase == "start":
            return MAX_CONTROL_FRAME if kind == _J else -1
        if self._phase == "running":
            return max(self._report_bound, self._display_bytes) if kind == _J else -1
        if self._phase == "contents" and kind == _B:
            return self._sizes[0]
        return -1

    def accept(self, kind: int, payload: bytes) -> None:
        """Take one frame the ``bound`` allowed.

        Raises:
            WorkerProtocolError: it is malformed, out of order or over a limit.
        """
        if kind == _B:
            if len(payload) != self._sizes.popleft():
                raise WorkerProtocolError("file content does not have its announced size")
            self.contents.append(payload)
            if not self._sizes:
                self._phase = "finished"
            return
        nodes = json_nodes(payload, self._nodes)
        if nodes > self._nodes:
            raise WorkerProtocolError(f"more than {MAX_JSON_NODES} JSON values in one run")
        self._nodes -= nodes
        message = decode_message(payload)
        if self._phase == "start":
            if not isinstance(message, Started):
                raise WorkerProtocolError("expected started")
            self.started = True
            self._phase = "running"
        elif isinstance(message, Display):
            self._display(message, len(payload))
        elif isinstance(message, Done):
            if len(payload) > self._report_bound:
                raise WorkerProtocolError(f"report of {len(payload)} bytes exceeds its bound")
            self._done(message)
        else:
            raise WorkerProtocolError(f"unexpected {type(message).__name__.lower()} message")

    def _display(self, message: Display, size: int) -> None:
        limits = self._limits
        if len(self.display) >= limits.max_display or size > self._display_bytes:
            raise WorkerProtocolError("display exceeds its count or byte bound")
        self._display_bytes -= size
        self._check_bundle(message.data, "display bundle")
        self.display.append(message.data)
        self._on_display(message.data)

    def _check_bundle(self, data: dict[str, Any], what: str) -> None:
        ceiling = self._limits.output_chars + _MARKER_ROOM
        for mime, value in data.items():
            if mime.startswith("text/"):
                if not isinstance(value, str):
                    raise WorkerProtocolError(f"{what} has non-text {mime[:64]}")
                _text_within(value, ceiling, f"{what} {mime[:64]}")

    def _done(self, done: Done) -> None:
        limits = self._limits
        ceiling = limits.output_chars + _MARKER_ROOM
        if done.plain is not None:
            _text_within(done.plain.head, limits.output_chars, "result")
            _text_within(done.plain.tail, limits.output_chars, "result")
        if done.result is not None:
            self._check_bundle(done.result, "result")
        if done.error is not None:
            for field in (done.error.type, done.error.message, done.error.traceback):
                _text_within(field, ceiling, "error")
        if len(done.files) > limits.max_files:
            raise WorkerProtocolError("more files than the run may report")
        sizes = [f.size for f in done.files if f.content]
        if sum(sizes) > limits.max_file_bytes:
            raise WorkerProtocolError("file contents exceed the run's returned-bytes bound")
        self.done = done
        self._sizes.extend(sizes)
        self._phase = "contents" if sizes else "finished"
