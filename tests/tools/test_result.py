from __future__ import annotations

import json

from corral.tools import ImageContent, ToolResult


def test_ok_result_to_dict_is_the_spec_result_object() -> None:
    result = ToolResult.ok(
        "hi",
        structured={"a": [1]},
        details={"tool": "t"},
        usage={"total_tokens": 3, "cost": 0},
    )
    assert result.to_dict() == {
        "is_error": False,
        "error": None,
        "content": [{"type": "text", "text": "hi"}],
        "structured": {"a": [1]},
        "details": {"tool": "t"},
        "usage": {"total_tokens": 3, "cost": 0},
    }
    json.dumps(result.to_dict())


def test_failure_carries_kind_status_and_code() -> None:
    result = ToolResult.failure("auth", "no", status=401, code="1300", details={"tool": "t"})
    assert result.is_error
    assert result.error == {"kind": "auth", "message": "no", "status": 401, "code": "1300"}
    assert result.text == "no"
    assert ToolResult.failure("x", "y").error == {"kind": "x", "message": "y"}


def test_to_mcp_puts_details_and_usage_in_meta() -> None:
    image = ImageContent(type="image", data="aGk=", mimeType="image/png")
    result = ToolResult.ok("t", structured={"k": 1}, details={"d": 1}, images=[image])
    assert result.to_mcp() == {
        "content": [{"type": "text", "text": "t"}, dict(image)],
        "isError": False,
        "structuredContent": {"k": 1},
        "_meta": {"corral/details": {"d": 1}, "corral/usage": None},
    }
    assert "structuredContent" not in ToolResult.ok("t").to_mcp()
    assert result.text == "t"  # images are left out of the text


def test_serialised_copies_do_not_alias_the_result() -> None:
    result = ToolResult.ok("t", details={"tools": ["a"]})
    result.to_dict()["details"]["tools"].append("b")
    assert result.details == {"tools": ["a"]}
