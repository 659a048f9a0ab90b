"""What a tool call returns: model-facing content, persisted details, and the error, if any."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "BlobResource",
    "ContentBlock",
    "ImageContent",
    "ResourceContent",
    "ResourceLinkContent",
    "TextContent",
    "ToolErrorInfo",
    "ToolResult",
]


class TextContent(TypedDict):
    """A text block, as MCP and the provider APIs spell it."""

    type: Literal["text"]
    text: str


class ImageContent(TypedDict):
    """An image block: base64 ``data`` and its ``mimeType`` (MCP's shape)."""

    type: Literal["image"]
    data: str
    mimeType: str


class BlobResource(TypedDict):
    """A resource's bytes, base64, with its URI and media type (MCP's blob contents)."""

    uri: str
    mimeType: str
    blob: str


class ResourceContent(TypedDict):
    """A resource embedded in the result: a generated file small enough to carry inline."""

    type: Literal["resource"]
    resource: BlobResource


class ResourceLinkContent(TypedDict):
    """A link to a resource the client reads with ``resources/read`` (a larger file)."""

    type: Literal["resource_link"]
    uri: str
    name: str
    mimeType: str
    size: int


ContentBlock = TextContent | ImageContent | ResourceContent | ResourceLinkContent


class ToolErrorInfo(TypedDict):
    """Why a call failed: a closed ``kind`` callers branch on, and a sentence for people."""

    kind: str
    message: str
    status: NotRequired[int]
    code: NotRequired[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """The result of one tool call.

    Audiences differ per field, and that is the privacy rule: ``content`` and ``structured`` go
    to the model; ``details`` is persisted (transcripts, logs, evidence) and must never hold
    signed URLs, code, program output or secrets; ``usage`` is for host accounting.
    """

    content: tuple[ContentBlock, ...] = ()
    structured: Mapping[str, Any] | None = None
    """JSON object for the model; MCP ``structuredContent``."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """Persisted, privacy-filtered metadata about the call."""
    is_error: bool = False
    error: ToolErrorInfo | None = None
    usage: Mapping[str, Any] | None = None
    """Token counts and cost reported by a remote backend, or None."""

    @classmethod
    def ok(
        cls,
        text: str,
        *,
        structured: Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
        usage: Mapping[str, Any] | None = None,
        images: Iterable[ImageContent] = (),
    ) -> ToolResult:
        """A successful result whose content is ``text`` (and any images)."""
        blocks: list[ContentBlock] = [TextContent(type="text", text=text)]
        blocks.extend(images)
        return cls(
            content=tuple(blocks),
            structured=structured,
            details=details or {},
            usage=usage,
        )

    @classmethod
    def failure(
        cls,
        kind: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        status: int | None = None,
        code: str | None = None,
        structured: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        """An ``is_error`` result: the model reads ``message``; callers branch on ``kind``."""
        error = ToolErrorInfo(kind=kind, message=message)
        if status is not None:
            error["status"] = status
        if code is not None:
            error["code"] = code
        return cls(
            content=(TextContent(type="text", text=message),),
            structured=structured,
            details=details or {},
            is_error=True,
            error=error,
        )

    @property
    def text(self) -> str:
        """The text blocks joined with newlines (images left out)."""
        return "\n".join(b["text"] for b in self.content if b["type"] == "text")

    @property
    def files(self) -> tuple[ResourceContent | ResourceLinkContent, ...]:
        """The generated files the result carries or links to."""
        return tuple(b for b in self.content if b["type"] in ("resource", "resource_link"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON result object (docs/mistral.md §3.7); what ``corral tools call`` prints."""
        return {
            "is_error": self.is_error,
            "error": _copy(self.error),
            "content": [dict(b) for b in self.content],
            "structured": _copy(self.structured),
            "details": _copy(self.details),
            "usage": _copy(self.usage),
        }

    def to_mcp(self) -> dict[str, Any]:
        """A ``CallToolResult`` dict; ``details`` and ``usage`` ride in ``_meta``
        (docs/mistral.md §5.2)."""
        data: dict[str, Any] = {
            "content": [dict(b) for b in self.content],
            "isError": self.is_error,
            "_meta": {"corral/details": _copy(self.details), "corral/usage": _copy(self.usage)},
        }
        if self.structured is not None:
            data["structuredContent"] = _copy(self.structured)
        return data


def _copy(value: Any) -> Any:
    # Results are shared between front ends; hand out copies so no caller mutates another's view.
    return copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
