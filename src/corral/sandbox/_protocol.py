"""The framed pipe protocol between the engine and a worker.

A frame is a 4-byte big-endian length, a 1-byte kind (``J`` for a JSON object, ``B`` for raw
bytes) and the payload. The worker side is synchronous and runs inside the sandbox; the engine
side treats every frame as untrusted: user code shares the worker's process and can write to
the socket itself, so a frame that is malformed, of the wrong kind or longer than the reader's
bound is a protocol error, never a crash.
"""

from __future__ import annotations

import os
import struct
from json import JSONEncoder, loads
from typing import Any

from corral.errors import WorkerProtocolError

__all__ = [
    "MAX_CONTROL_FRAME",
    "FrameDecoder",
    "encode_bytes",
    "encode_json",
    "read_frame_sync",
    "write_frames_sync",
]

_HEADER = struct.Struct(">IB")
# Bound once, at import: user code shares the worker's modules and may replace json.dumps.
_encode = JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
MAX_CONTROL_FRAME = 4 * 1024 * 1024
"""Bytes; JSON frames from a worker carry fitted output and metadata, never file contents."""


def encode_json(message: dict[str, Any]) -> bytes:
    payload = _encode(message).encode()
    return _HEADER.pack(len(payload), ord("J")) + payload


def encode_bytes(data: bytes) -> bytes:
    return _HEADER.pack(len(data), ord("B")) + data


def write_frames_sync(fd: int, *frames: bytes) -> None:
    data = memoryview(b"".join(frames))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exact(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the protocol socket")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame_sync(fd: int, max_size: int) -> tuple[str, Any]:
    """Read one frame from a blocking fd; returns ("J", dict) or ("B", bytes)."""
    size, kind = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if size > max_size:
        raise WorkerProtocolError(f"frame of {size} bytes exceeds {max_size}")
    payload = _read_exact(fd, size)
    return _decode(chr(kind), payload)


def _decode(kind: str, payload: bytes) -> tuple[str, Any]:
    if kind == "B":
        return kind, payload
    if kind != "J":
        raise WorkerProtocolError(f"unknown frame kind {kind!r}")
    try:
        message = loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WorkerProtocolError(f"malformed JSON frame: {exc}") from None
    if not isinstance(message, dict):
        raise WorkerProtocolError("JSON frame is not an object")
    return kind, message


class FrameDecoder:
    """Incremental decoder for the engine side; bounded by ``max_size`` per frame."""

    def __init__(self, max_size: int) -> None:
        self._buffer = bytearray()
        self._max_size = max_size

    def feed(self, data: bytes) -> list[tuple[str, Any]]:
        """Add bytes; return every complete frame they finish.

        Raises:
            WorkerProtocolError: a frame is oversized, of unknown kind or malformed.
        """
        self._buffer += data
        frames: list[tuple[str, Any]] = []
        while len(self._buffer) >= _HEADER.size:
            size, kind = _HEADER.unpack_from(self._buffer)
            if size > self._max_size:
                raise WorkerProtocolError(f"frame of {size} bytes exceeds {self._max_size}")
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            payload = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            frames.append(_decode(chr(kind), payload))
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)
