"""The MCP server as clients meet it: a real ``python -m corral.mcp`` subprocess on stdio (real
workers), and streamable HTTP on a loopback port (over the sandbox's in-process twin)."""

from __future__ import annotations

import functools
import os
import pathlib
import sys
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from corral.engine import Engine
from corral.mcp import serve_http
from corral.tools import Invocation, Tool, ToolContext, ToolRegistry, ToolResult

pytestmark = pytest.mark.anyio

REPO = pathlib.Path(__file__).resolve().parents[2]


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def _exercise(client: Client) -> None:
    listed = await client.list_tools()
    assert [t.name for t in listed.tools][:3] == ["code_interpreter", "source_add", "code_session"]
    added = await client.call_tool("source_add", {"content": "h\n9\n7.5\n", "filename": "r.csv"})
    source_id = added.structured_content["id"]
    result = await client.call_tool(
        "code_interpreter",
        {
            "summary": "mean",
            "code": f"v = [float(x) for x in open(input_files[{source_id!r}]).read().split()[1:]]\n"
            "print(6 * 7)\nsum(v) / len(v)",
            "sourceIds": [source_id],
        },
    )
    assert not result.is_error, text_of(result)
    assert result.structured_content["stdout"] == "42\n"
    assert result.structured_content["result"] == {"text/plain": "8.25"}


@pytest.mark.isolation
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_subprocess(tmp_path: pathlib.Path, mode: str) -> None:
    env = {"CORRAL_DATA_DIR": str(tmp_path)}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "corral.mcp"], env=env, cwd=str(REPO)
    )
    with anyio.fail_after(60):
        async with Client(params, mode=mode) as client:
            assert client.server_info is not None
            assert client.server_info.name == "corral"
            await _exercise(client)


@pytest.mark.isolation
async def test_stdio_has_no_call_cap_unless_the_operator_sets_one(tmp_path: pathlib.Path) -> None:
    env = {"CORRAL_DATA_DIR": str(tmp_path)}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    capped = tmp_path / "corral.toml"
    capped.write_text("[mcp]\nmax_calls_per_session = 11\n")
    for args, allowed in (
        (["-m", "corral.mcp"], 12),
        (["-m", "corral.mcp", "--config", str(capped)], 11),
    ):
        params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))
        with anyio.fail_after(120):
            async with Client(params, mode="legacy") as client:
                outcomes = [
                    (
                        await client.call_tool("code_interpreter", {"summary": "s", "code": "1"})
                    ).structured_content["outcome"]
                    for _ in range(12)
                ]
        assert outcomes == ["ok"] * allowed + ["quota_exceeded"] * (12 - allowed), args


@pytest.mark.network
async def test_streamable_http_sessions_are_separate_and_closed_on_delete(engine: Engine) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def setup(registry: ToolRegistry, invocation: Invocation) -> None:
        async def activate(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
            registry.set_active([*registry.active_names(), "later"])
            return ToolResult.ok("activated")

        schema = {"type": "object", "properties": {}}
        later = Tool(name="later", description="Deferred.", parameters=schema, handler=activate)
        registry.register(later, "deferred")
        registry.register(
            Tool(name="activate", description="Activates.", parameters=schema, handler=activate)
        )

    before = len(engine.sessions())
    async with anyio.create_task_group() as tg:
        serving = functools.partial(serve_http, engine, port=0, extra_tools=setup)
        port = await tg.start(serving)
        url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(60):
            async with Client(url, message_handler=on_message) as first, Client(url) as second:
                # HTTP sessions need the handshake era; discovery is refused, so the SDK
                # falls back to it.
                assert first.protocol_version == "2025-11-25"
                await _exercise(first)
                await first.call_tool("activate", {})
                await changed.wait()  # the active set changed, over the standalone stream
                added = await first.call_tool("source_add", {"content": "x", "filename": "x.txt"})
                foreign = await second.call_tool(
                    "code_interpreter",
                    {"summary": "s", "code": "1", "sourceIds": [added.structured_content["id"]]},
                )
                assert foreign.structured_content["outcome"] == "unavailable_source"
                state = await second.call_tool("code_session", {"summary": "s", "code": "y = 1"})
                assert not state.is_error, text_of(state)
                assert len(engine.sessions()) == before + 1
            # Leaving the client DELETEs its MCP session; its interpreter goes with it.
            assert len(engine.sessions()) == before
        tg.cancel_scope.cancel()
