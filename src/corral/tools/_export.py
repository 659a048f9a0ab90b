"""Tool declarations in each target's own shape: OpenAI, Anthropic, Mistral and MCP."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Literal, get_args

from corral.tools._tool import Tool

__all__ = ["EXPORT_FORMATS", "ExportFormat", "export_tools"]

ExportFormat = Literal["anthropic", "mcp", "mistral", "openai"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)


def export_tools(tools: Iterable[Tool], fmt: ExportFormat) -> list[dict[str, Any]]:
    """Declare ``tools`` for one target; schemas are copied, never rewritten.

    ``strict`` is left unset for OpenAI and Mistral: strict mode requires every property to
    be required and ``additionalProperties: false``, which connector schemas do not promise.

    Raises:
        ValueError: ``fmt`` is not one of :data:`ExportFormat`.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {EXPORT_FORMATS}")
    return [_export_one(tool, fmt) for tool in tools]


def _export_one(tool: Tool, fmt: ExportFormat) -> dict[str, Any]:
    schema = copy.deepcopy(dict(tool.parameters))
    if fmt == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": schema}
    if fmt == "mcp":
        data: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "inputSchema": schema,
        }
        annotations = tool.annotations.to_dict()
        if annotations:
            data["annotations"] = annotations
        if tool.annotations.title:
            data["title"] = tool.annotations.title
        return data
    # OpenAI chat completions and Mistral function calling share one shape.
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": schema},
    }
