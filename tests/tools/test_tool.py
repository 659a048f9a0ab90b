from __future__ import annotations

import pytest

from corral.errors import ToolError
from corral.tools import ToolAnnotations

from .helpers import make_tool


@pytest.mark.parametrize("name", ["", "has space", "dot.name", "x" * 65, "ünï"])
def test_names_must_fit_every_target(name: str) -> None:
    with pytest.raises(ToolError, match="does not match"):
        make_tool(name)


def test_a_64_character_name_is_fine() -> None:
    assert make_tool("a" * 64).name == "a" * 64


@pytest.mark.parametrize(
    "schema",
    [{"type": "string"}, {"properties": {}}, {"type": "object", "properties": {"x": {"type": 3}}}],
)
def test_parameters_must_be_a_valid_object_schema(schema: dict[str, object]) -> None:
    with pytest.raises(ToolError):
        make_tool("t", parameters=schema)


def test_validate_reports_paths_and_bounds_the_list() -> None:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer"} for i in range(8)},
    }
    tool = make_tool("t", parameters=schema)
    problems = tool.validate({f"p{i}": "x" * 1000 for i in range(8)})
    assert len(problems) == 6
    assert problems[0].startswith("p0: ")
    assert problems[0].endswith("…")
    assert problems[-1] == "… and 3 more"
    assert tool.validate({"p1": 1}) == []


def test_a_dangling_ref_is_reported_not_raised() -> None:
    tool = make_tool(
        "t", parameters={"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    )
    problems = tool.validate({"a": 1})
    assert problems
    assert problems[0].startswith("(schema):")


def test_anyof_nullable_schemas_validate() -> None:
    schema = {
        "type": "object",
        "properties": {"folder": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    }
    tool = make_tool("t", parameters=schema)
    assert tool.validate({"folder": None}) == []
    assert tool.validate({"folder": 3}) != []


def test_annotations_round_trip_mcp_camel_case() -> None:
    wire = {"title": "T", "readOnlyHint": True, "destructiveHint": False, "openWorldHint": True}
    annotations = ToolAnnotations.from_dict({**wire, "idempotentHint": "yes", "other": 1})
    assert annotations.idempotent_hint is None  # only booleans are taken
    assert annotations.to_dict() == wire
    assert ToolAnnotations.from_dict(None) == ToolAnnotations()
    assert ToolAnnotations().to_dict() == {}
