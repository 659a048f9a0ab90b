from __future__ import annotations

from typing import Any

import pytest

from corral.errors import RemoteUnavailable, ToolNameTaken, UnknownTool
from corral.tools import ToolContext, ToolRegistry, ToolResult

from .helpers import make_tool

pytestmark = pytest.mark.anyio


def test_register_never_silently_replaces() -> None:
    registry = ToolRegistry()
    first = make_tool("echo")
    registry.register(first)
    with pytest.raises(ToolNameTaken):
        registry.register(make_tool("echo"))
    assert registry.get("echo") is first


def test_replace_true_is_the_explicit_way_to_swap_a_definition() -> None:
    registry = ToolRegistry()
    registry.register(make_tool("echo"))
    second = make_tool("echo", description="v2")
    registry.register(second, replace=True)
    assert registry.get("echo") is second
    assert registry.names() == ["echo"]


def test_hidden_withdraws_but_keeps_the_name_reserved() -> None:
    registry = ToolRegistry()
    tool = make_tool("echo")
    registry.register(tool)
    registry.register(tool, "hidden")  # same object: the withdraw path, no replace needed
    assert registry.active() == []
    assert registry.is_taken("echo")
    assert registry.exposure("echo") == "hidden"
    with pytest.raises(ToolNameTaken):
        registry.register(make_tool("echo"))
    registry.set_active(["echo"])  # activating a hidden tool has no effect
    assert registry.active_names() == []


def test_deferred_waits_for_set_active() -> None:
    registry = ToolRegistry()
    registry.register(make_tool("a"))
    registry.register(make_tool("b"), "deferred")
    assert registry.active_names() == ["a"]
    registry.set_active(["b", "a"])
    assert registry.active_names() == ["a", "b"]  # registration order, not request order
    registry.set_active(["b"])
    assert registry.active_names() == ["b"]


def test_set_active_rejects_unknown_names() -> None:
    registry = ToolRegistry()
    with pytest.raises(UnknownTool):
        registry.set_active(["nope"])


def test_get_and_exposure_raise_unknown_tool() -> None:
    registry = ToolRegistry()
    with pytest.raises(UnknownTool):
        registry.get("nope")
    with pytest.raises(UnknownTool):
        registry.exposure("nope")
    assert not registry.is_taken("nope")


def test_listeners_fire_only_when_the_declared_tools_change() -> None:
    registry = ToolRegistry()
    events: list[list[str]] = []
    remove = registry.add_listener(lambda: events.append(registry.active_names()))
    tool = make_tool("a")
    registry.register(tool)
    registry.register(make_tool("b"), "deferred")  # not declared: no event
    registry.set_active(["a"])  # unchanged: no event
    registry.set_active(["a", "b"])
    registry.register(tool, "hidden")
    registry.register(make_tool("b", description="v2"), replace=True)  # new definition
    assert events == [["a"], ["a", "b"], ["b"], ["b"]]
    remove()
    remove()  # idempotent
    registry.set_active([])
    assert len(events) == 4


async def test_call_runs_the_handler_with_a_context() -> None:
    registry = ToolRegistry()
    seen: list[ToolContext] = []

    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        seen.append(context)
        return ToolResult.ok(str(arguments["x"]))

    registry.register(make_tool("echo", handler=handler))
    ctx = ToolContext(invocation="inv-1")
    result = await registry.call("echo", {"x": 3}, ctx)
    assert result.text == "3"
    assert seen == [ctx]
    await registry.call("echo", {"x": 4})
    assert seen[1].invocation is None


@pytest.mark.parametrize("exposure", ["deferred", "hidden", None])
async def test_calling_an_undeclared_name_is_an_error_result(exposure: Any) -> None:
    registry = ToolRegistry()
    registry.unknown_tool_hint = "Call mistral_connector_load first."
    if exposure is not None:
        registry.register(make_tool("echo"), exposure)
    result = await registry.call("echo", {"x": 1})
    assert result.is_error
    assert result.error == {
        "kind": "unknown_tool",
        "message": "Unknown tool: echo. Call mistral_connector_load first.",
    }
    assert result.text.startswith("Unknown tool: echo.")


async def test_invalid_arguments_are_a_typed_error_result_not_an_exception() -> None:
    registry = ToolRegistry()
    registry.register(make_tool("echo"))
    result = await registry.call("echo", {"x": "three", "extra": 1})
    assert result.is_error
    assert result.error is not None
    assert result.error["kind"] == "invalid_input"
    assert "x: 'three' is not of type 'integer'" in result.text
    assert "Additional properties are not allowed" in result.text
    assert dict(result.details) == {"tool": "echo"}
    missing = await registry.call("echo", {})
    assert "(arguments): 'x' is a required property" in missing.text
    not_object = await registry.call("echo", ["x"])
    assert not_object.error is not None
    assert not_object.error["kind"] == "invalid_input"


async def test_a_corral_error_from_a_handler_becomes_a_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raise RemoteUnavailable("down")

    registry = ToolRegistry()
    registry.register(make_tool("echo", handler=handler))
    result = await registry.call("echo", {"x": 1})
    assert result.is_error
    assert result.error is not None
    assert result.error["kind"] == "tool_error"
    assert "RemoteUnavailable: down" in result.text
    assert "tool echo raised" in caplog.text


async def test_other_exceptions_propagate() -> None:
    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raise KeyError("bug")

    registry = ToolRegistry()
    registry.register(make_tool("echo", handler=handler))
    with pytest.raises(KeyError):
        await registry.call("echo", {"x": 1})


async def test_unknown_tool_without_a_hint_and_a_long_name() -> None:
    result = await ToolRegistry().call("x" * 200, {})
    assert result.text == f"Unknown tool: {'x' * 80}."
