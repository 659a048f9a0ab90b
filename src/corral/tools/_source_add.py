"""``source_add``: register an attachment in the invocation's sources and get its id back.

The id is what ``code_interpreter`` mounts; the model never handles a path. Ingestion
(CSV, XLSX, JSON, text) runs in a worker thread, since an XLSX workbook can take a while.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import anyio.to_thread

from corral.errors import SourceError, SourceTooLarge, UnsupportedSource
from corral.tools._invocation import Invocation
from corral.tools._result import ToolResult
from corral.tools._tool import Tool, ToolAnnotations, ToolContext

__all__ = ["SOURCE_ADD", "source_add_tool"]

SOURCE_ADD = "source_add"

_PREVIEW_CHARS = 1_500  # enough for a header row and a few records, so the model can write code

_DESCRIPTION = (
    "Register a file as a source of this run and get back its source id. Give its content as "
    "text, or as base64 for binary files such as XLSX or parquet (encoding='base64'). CSV/TSV, "
    "XLSX, JSON, plain text and Markdown are converted to canonical text (every XLSX sheet as "
    "CSV-like text; cell values, not formulas); other files (parquet, images, PDFs) have an "
    "empty text. Every source is kept with its original bytes. Pass the "
    "returned id in code_interpreter's sourceIds; the code reads it through input_files and "
    "input_assets. The result previews the start of the canonical text."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "description": "The file's content."},
        "encoding": {
            "type": "string",
            "enum": ["text", "base64"],
            "description": "How content is encoded; default text (UTF-8).",
        },
        "filename": {
            "type": "string",
            "description": "The file's name; its extension decides the format unless "
            "mediaType does.",
        },
        "mediaType": {"type": "string", "description": "The file's media type, if known."},
    },
    "required": ["content", "filename"],
    "additionalProperties": False,
}

_KINDS: tuple[tuple[type[SourceError], str], ...] = (
    (UnsupportedSource, "unsupported_source"),
    (SourceTooLarge, "source_too_large"),
    (SourceError, "source_error"),
)


def _decode(content: str, encoding: str) -> bytes:
    if encoding == "base64":
        return base64.b64decode(content, validate=True)
    return content.encode("utf-8")


async def _handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    invocation = context.invocation
    if not isinstance(invocation, Invocation):
        return ToolResult.failure(
            "tool_error",
            f"{SOURCE_ADD} needs an Invocation in ToolContext.invocation; the host did not "
            "provide one.",
            details={"tool": SOURCE_ADD},
        )
    encoding = arguments.get("encoding", "text")
    media_type = arguments.get("mediaType")
    details: dict[str, Any] = {"tool": SOURCE_ADD, "encoding": encoding}
    try:
        data = _decode(arguments["content"], encoding)
    except (binascii.Error, ValueError) as exc:
        return ToolResult.failure(
            "invalid_input", f"content is not valid {encoding}: {exc}", details=details
        )
    try:
        source = await anyio.to_thread.run_sync(
            invocation.sources.add_attachment, data, arguments["filename"], media_type
        )
    except SourceError as exc:
        kind = next(k for cls, k in _KINDS if isinstance(exc, cls))
        return ToolResult.failure(kind, f"The file was not registered: {exc}", details=details)
    info = source.info()
    text = source.text.decode("utf-8", errors="replace")
    preview = text[:_PREVIEW_CHARS]
    more = len(text) - len(preview)
    lines = [
        f"Registered source {source.id} ({info['filename']}, {info['media_type']}, "
        f"{info['text_bytes']} bytes of canonical text).",
        f"Mount it with code_interpreter sourceIds=[{source.id!r}]; the code reads "
        f"input_files[{source.id!r}] (canonical text) or input_assets[{source.id!r}]['original'].",
        "--- canonical text (start) ---",
        preview.rstrip("\n"),
    ]
    if more > 0:
        lines.append(f"[... {more} more characters]")
    # Persisted: the format and sizes, never the id, the file name or the content.
    details.update(
        media_type=info["media_type"],
        text_bytes=info["text_bytes"],
        original_bytes=info["original_bytes"],
        text_sha256=info["text_sha256"],
        original_sha256=info["original_sha256"],
    )
    return ToolResult.ok("\n".join(lines), structured=dict(info), details=details)


def source_add_tool() -> Tool:
    """The ``source_add`` tool; calls register into ``ToolContext.invocation.sources``."""
    return Tool(
        name=SOURCE_ADD,
        description=_DESCRIPTION,
        parameters=_PARAMETERS,
        handler=_handler,
        annotations=ToolAnnotations(
            title="Add a source",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
