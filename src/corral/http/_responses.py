"""Response helpers shared by both modes: exact-field JSON and streamed file bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse

from corral import _fs

__all__ = ["file_response", "json_response"]


def json_response(
    content: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """Compact JSON with keys in the order given (DIAL Core compares fields, not spacing)."""
    body = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(body, status, headers=headers, media_type="application/json")


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
    return StreamingResponse(_fs.read_chunks(fd, size, chunk_size), headers=all_headers)
