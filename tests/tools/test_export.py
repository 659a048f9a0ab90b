"""Schema export, each format checked against its own rules."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import mcp.types
import pytest

from corral.tools import EXPORT_FORMATS, Tool, ToolAnnotations, export_tools

from .helpers import make_tool

# Each provider's documented function-name rule.
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def tools() -> list[Tool]:
    nullable = {
        "type": "object",
        "required": ["query"],
        "properties": {
            "query": {"type": "string"},
            "folder": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
    }
    return [
        make_tool("echo", annotations=ToolAnnotations(title="Echo", read_only_hint=True)),
        make_tool("search_messages__outlook", parameters=nullable, annotations=ToolAnnotations()),
    ]


def check_object_schema(schema: Any) -> None:
    assert isinstance(schema, dict)
    assert schema["type"] == "object"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("fmt", ["openai", "mistral"])
def test_openai_and_mistral_function_declarations(fmt: Any) -> None:
    exported = export_tools(tools(), fmt)
    for entry in exported:
        assert set(entry) == {"type", "function"}
        assert entry["type"] == "function"
        function = entry["function"]
        assert set(function) == {"name", "description", "parameters"}  # no "strict"
        assert NAME.fullmatch(function["name"])
        assert isinstance(function["description"], str)
        check_object_schema(function["parameters"])
    assert exported[1]["function"]["parameters"]["properties"]["folder"]["anyOf"]


def test_anthropic_declarations() -> None:
    for entry in export_tools(tools(), "anthropic"):
        assert set(entry) == {"name", "description", "input_schema"}
        assert NAME.fullmatch(entry["name"])
        check_object_schema(entry["input_schema"])


def test_mcp_declarations_validate_as_mcp_tools() -> None:
    exported = export_tools(tools(), "mcp")
    first = mcp.types.Tool.model_validate(exported[0])
    assert first.title == "Echo"
    assert first.annotations is not None
    assert first.annotations.read_only_hint is True
    assert exported[0]["annotations"] == {"title": "Echo", "readOnlyHint": True}
    assert "annotations" not in exported[1]
    assert "title" not in exported[1]
    for entry in exported:
        tool = mcp.types.Tool.model_validate(entry)
        check_object_schema(tool.input_schema)


def test_schemas_are_copied_verbatim() -> None:
    tool = tools()[1]
    for fmt in EXPORT_FORMATS:
        exported = export_tools([tool], fmt)  # type: ignore[arg-type]
        assert str(tool.parameters) in str(exported)
    exported = export_tools([tool], "anthropic")
    exported[0]["input_schema"]["properties"].clear()
    assert tool.parameters["properties"]


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown export format"):
        export_tools([], "gemini")  # type: ignore[arg-type]
