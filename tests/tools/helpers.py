"""Small tool factories for the registry tests."""

from __future__ import annotations

from typing import Any

from corral.tools import Tool, ToolAnnotations, ToolContext, ToolResult

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "label": {"type": "string"}},
    "required": ["x"],
    "additionalProperties": False,
}


def make_tool(name: str = "echo", **kwargs: Any) -> Tool:
    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.ok(f"{name}:{arguments.get('x')}", details={"tool": name})

    kwargs.setdefault("description", f"The {name} tool.")
    kwargs.setdefault("parameters", SCHEMA)
    kwargs.setdefault("handler", handler)
    kwargs.setdefault("annotations", ToolAnnotations(read_only_hint=True))
    return Tool(name=name, **kwargs)
