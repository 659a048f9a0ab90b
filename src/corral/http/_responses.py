"""Response helpers shared by both modes: exact-field JSON and streamed file bodies."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio.to_thread
from fastapi import Response
from fastapi.responses import StreamingResponse

__all__ = ["file_response", "json_response"]


def json_response(
    content: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """Compact JSON with keys in the order given (DIAL Core compares fields, not spacing)."""
    body = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(body, status, headers=headers, media_type="application/json")


async def _chunks(fd: int, size: int, chunk_size: int) -> AsyncIterator[bytes]:
    """Exactly ``size`` bytes from ``fd``; closes it however the stream ends."""
    try:
        remaining = size
        while remaining > 0:
            chunk = await anyio.to_thread.run_sync(os.read, fd, min(chunk_size, remaining))
            if not chunk:
                # Truncated while we sent it: the client sees a short body and a reset.
                raise OSError(f"file shrank by {remaining} bytes while being sent")
            remaining -= len(chunk)
            yield chunk
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def file_response(
    fd: int,
    size: int,
    *,
    media_type: str = "application/octet-stream",
    chunk_size: int = 64 * 1024,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Stream an open file; ``Content-Length`` is the size taken when it was opened.

    The content type goes out as stored: Starlette would append a charset to ``text/*``.
    """
    all_headers = {"Content-Length": str(size), "Content-Type": media_type, **(headers or {})}
    return StreamingResponse(_chunks(fd, size, chunk_size), headers=all_headers)
