"""The MCP server through the SDK's own in-memory client, over the sandbox's in-process twin
(real workers where a test needs what happens inside them).

``mode="legacy"`` drives the initialize-handshake stream loop (what desktop clients speak
today); ``mode="auto"`` negotiates the 2026-07-28 per-request era in process.
"""

from __future__ import annotations

import base64
import json
import pathlib
import secrets
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from corral.engine import Engine
from corral.mcp import McpOptions, build_server
from corral.tools import (
    Invocation,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
)
from tests.engine.twinkit import SPIN

pytestmark = pytest.mark.anyio

WORKBOOK = pathlib.Path(__file__).resolve().parents[2] / "examples" / "northstar.xlsx"
MODES = ["legacy", "auto"]


class Notes:
    """Collects server notifications; ``list_changed`` is set by the first tools one."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.list_changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        self.seen.append(message)
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed.set()


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def call(
    client: Client, name: str, arguments: dict[str, Any], **kw: Any
) -> types.CallToolResult:
    with anyio.fail_after(30):
        return await client.call_tool(name, arguments, **kw)


@pytest.mark.parametrize("mode", MODES)
async def test_serves_three_tools_and_advertises_list_changed(engine: Engine, mode: str) -> None:
    async with Client(build_server(engine), mode=mode) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        listed = await client.list_tools()
    names = [t.name for t in listed.tools]
    assert names == ["code_interpreter", "source_add", "code_session"]
    interpreter = listed.tools[0]
    assert set(interpreter.input_schema["properties"]) == {"summary", "code", "sourceIds"}
    assert interpreter.input_schema["additionalProperties"] is False
    assert interpreter.description is not None
    assert "calls left" not in interpreter.description  # no cap: nothing to count down
    assert "Budget" not in interpreter.description
    assert interpreter.annotations is not None
    assert interpreter.annotations.read_only_hint


@pytest.mark.parametrize("mode", MODES)
async def test_workbook_source_to_mean_with_image_and_structured_content(
    real_engine: Engine, mode: str
) -> None:
    # Real workers: the figure becomes a PNG through the worker's own matplotlib backend.
    async with Client(build_server(real_engine), mode=mode) as client:
        added = await call(
            client,
            "source_add",
            {
                "content": base64.b64encode(WORKBOOK.read_bytes()).decode(),
                "encoding": "base64",
                "filename": "northstar.xlsx",
            },
        )
        assert not added.is_error, text_of(added)
        source_id = added.structured_content["id"]
        code = (
            "import csv, matplotlib.pyplot as plt\n"
            f"rows = list(csv.reader(open(input_files[{source_id!r}])))[2:]\n"
            "hours = [float(r[1]) for r in rows]\n"
            "plt.bar([r[0] for r in rows], hours); plt.show()\n"
            "sum(hours) / len(hours)"
        )
        result = await call(
            client,
            "code_interpreter",
            {"summary": "Mean runtime", "code": code, "sourceIds": [source_id]},
        )
    assert not result.is_error, text_of(result)
    assert [block.type for block in result.content] == ["text", "image"]
    image = result.content[1]
    assert isinstance(image, types.ImageContent)
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data).startswith(b"\x89PNG")
    data = result.structured_content
    assert data["outcome"] == "ok"
    assert data["status"] == "SUCCESS"
    assert data["result"] == {"text/plain": "8.25"}
    assert data["evidence"]["inputs"][0]["id"] == source_id
    assert "8.25" in text_of(result)
    assert result.meta is not None
    details = result.meta["corral/details"]
    assert details["outcome"] == "ok"
    assert source_id not in json.dumps(details)


@pytest.mark.parametrize("mode", MODES)
async def test_progress_flows_for_a_progress_token_and_discloses_nothing(
    engine: Engine, mode: str
) -> None:
    marker = "MARK" + secrets.token_hex(6)
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async with Client(build_server(engine), mode=mode) as client:
        result = await call(
            client,
            "code_interpreter",
            {"summary": "s", "code": f"# {marker}\nprint('{marker}')\n'{marker}'"},
            progress_callback=on_progress,
        )
    assert marker in text_of(result)
    steps = [p for p, _, _ in updates]
    assert steps[0] == 1
    assert steps[-1] == 5
    assert steps == sorted(steps)
    assert all(total == 5 for _, total, _ in updates)
    assert "finished" in (updates[-1][2] or "")
    assert "outcome ok" in (updates[-1][2] or "")
    assert marker not in json.dumps(updates)


async def _with_a_deferred_tool(registry: ToolRegistry, invocation: Invocation) -> None:
    """Registers ``later`` (deferred) and ``activate``, which makes ``later`` active."""

    async def later(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.ok("later")

    async def activate(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        registry.set_active([*registry.active_names(), "later"])
        return ToolResult.ok("activated")

    schema = {"type": "object", "properties": {}}
    registry.register(
        Tool(name="later", description="Deferred.", parameters=schema, handler=later),
        "deferred",
    )
    registry.register(
        Tool(name="activate", description="Activates later.", parameters=schema, handler=activate)
    )


async def test_list_changed_follows_every_change_of_the_active_set(engine: Engine) -> None:
    notes = Notes()
    server = build_server(engine, extra_tools=_with_a_deferred_tool)
    async with Client(server, mode="legacy", message_handler=notes) as client:
        before = await client.list_tools()
        assert "later" not in [t.name for t in before.tools]
        await call(client, "activate", {})
        with anyio.fail_after(5):
            await notes.list_changed.wait()
        after = await client.list_tools()
        assert "later" in [t.name for t in after.tools]


async def test_the_2026_era_gets_list_changed_through_listen(engine: Engine) -> None:
    async with Client(build_server(engine, extra_tools=_with_a_deferred_tool)) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(tools_list_changed=True) as subscription:
            await call(client, "activate", {})
            with anyio.fail_after(5):
                async for _event in subscription:
                    break


async def test_each_mcp_session_is_its_own_invocation(engine: Engine) -> None:
    server = build_server(engine, options=McpOptions(max_calls_per_session=1))
    async with Client(server, mode="legacy") as first, Client(server, mode="legacy") as second:
        added = await call(first, "source_add", {"content": "a\n1\n", "filename": "a.csv"})
        source_id = added.structured_content["id"]
        used = await call(
            first, "code_interpreter", {"summary": "s", "code": "1", "sourceIds": [source_id]}
        )
        assert not used.is_error
        spent = await call(first, "code_interpreter", {"summary": "s", "code": "1"})
        assert spent.is_error
        assert spent.structured_content["outcome"] == "quota_exceeded"
        foreign = await call(
            second, "code_interpreter", {"summary": "s", "code": "1", "sourceIds": [source_id]}
        )
        assert foreign.structured_content["outcome"] == "unavailable_source"
        # The refused call spent the second session's only call; its budget was its own.
        assert foreign.is_error


async def test_a_client_that_gives_up_cancels_the_run(engine: Engine) -> None:
    async with Client(build_server(engine), mode="legacy") as client:
        with anyio.fail_after(30), pytest.raises(MCPError, match="timed out"):
            await client.call_tool(
                "code_interpreter",
                {"summary": "s", "code": SPIN},
                read_timeout_seconds=1.0,
            )
        # notifications/cancelled reached the server: the worker is terminated, not waited
        # for (the tool's own deadline is 30 s).
        with anyio.fail_after(5):
            while engine.statistics().running:  # noqa: ASYNC110 - the engine has no event for it
                await anyio.sleep(0.01)
        after = await call(client, "code_interpreter", {"summary": "s", "code": "1"})
    assert after.structured_content["outcome"] == "ok"


async def test_python_errors_are_tool_results_not_protocol_errors(engine: Engine) -> None:
    async with Client(build_server(engine), mode="legacy") as client:
        result = await call(client, "code_interpreter", {"summary": "s", "code": "[][1]"})
        unknown = await call(client, "no_such_tool", {})
        invalid = await call(client, "code_interpreter", {"summary": "s", "code": 1})
    assert result.is_error
    assert result.structured_content["outcome"] == "python_error"
    assert "IndexError: list index out of range" in text_of(result)
    assert unknown.is_error
    assert "Unknown tool" in text_of(unknown)
    assert invalid.is_error
    assert "Invalid arguments" in text_of(invalid)


async def test_code_session_keeps_state_until_reset_and_ends_with_the_mcp_session(
    engine: Engine,
) -> None:
    before = len(engine.sessions())
    async with Client(build_server(engine), mode="legacy") as client:
        set_x = await call(client, "code_session", {"summary": "s", "code": "x = 41"})
        assert not set_x.is_error, text_of(set_x)
        assert len(engine.sessions()) == before + 1
        use_x = await call(client, "code_session", {"summary": "s", "code": "x + 1"})
        assert use_x.structured_content["result"] == {"text/plain": "42"}
        fresh = await call(client, "code_interpreter", {"summary": "s", "code": "'x' in dir()"})
        assert fresh.structured_content["result"] == {"text/plain": "False"}
        reset = await call(client, "code_session", {"summary": "s", "code": "x", "reset": True})
        assert reset.structured_content["outcome"] == "python_error"
        assert "The session was reset" in text_of(reset)
    assert len(engine.sessions()) == before  # closed with the MCP session's invocation


async def test_no_cap_by_default_and_tool_descriptions_never_change(engine: Engine) -> None:
    notes = Notes()
    async with Client(build_server(engine), mode="legacy", message_handler=notes) as client:
        before = (await client.list_tools()).tools
        for _ in range(12):  # past the per-invocation default of 10
            result = await call(client, "code_interpreter", {"summary": "s", "code": "1"})
            assert result.structured_content["outcome"] == "ok"
            assert "calls left" not in text_of(result)
        assert (await client.list_tools()).tools == before
    assert not any(isinstance(m, types.ToolListChangedNotification) for m in notes.seen)


async def test_an_operator_cap_is_reported_in_results_not_descriptions(engine: Engine) -> None:
    notes = Notes()
    server = build_server(engine, options=McpOptions(max_calls_per_session=2))
    async with Client(server, mode="legacy", message_handler=notes) as client:
        before = (await client.list_tools()).tools
        assert "at most 2 calls" in str(before[0].description)
        first = await call(client, "code_interpreter", {"summary": "s", "code": "1"})
        assert "1 of 2 code calls left" in text_of(first)
        second = await call(client, "code_session", {"summary": "s", "code": "1"})
        assert "0 of 2 code calls left" in text_of(second)
        third = await call(client, "code_interpreter", {"summary": "s", "code": "1"})
        assert third.structured_content["outcome"] == "quota_exceeded"
        assert (await client.list_tools()).tools == before
    assert not any(isinstance(m, types.ToolListChangedNotification) for m in notes.seen)


async def test_code_session_takes_sources_and_returns_the_files_it_makes(engine: Engine) -> None:
    server = build_server(engine, options=McpOptions(embed_file_bytes=1000))
    async with Client(server, mode="legacy") as client:
        added = await call(client, "source_add", {"content": "n\n2\n5\n", "filename": "scores.csv"})
        source_id = added.structured_content["id"]
        made = await call(
            client,
            "code_session",
            {
                "summary": "s",
                "sourceIds": [source_id],
                "code": "rows = open('scores.csv').read().split()[1:]\n"
                "open('small.txt', 'w').write(str(sum(map(int, rows))))\n"
                "open('big.bin', 'wb').write(bytes(range(256)) * 20)\n",
            },
        )
        assert not made.is_error, text_of(made)
        assert f"Source {source_id} is /mnt/data/scores.csv" in text_of(made)
        embedded = [b for b in made.content if isinstance(b, types.EmbeddedResource)]
        links = [b for b in made.content if isinstance(b, types.ResourceLink)]
        assert len(embedded) == 1, made.content
        small = embedded[0].resource
        assert isinstance(small, types.BlobResourceContents)
        assert str(small.uri).endswith("/small.txt")
        assert base64.b64decode(small.blob) == b"7"
        assert [(link.name, link.size) for link in links] == [("big.bin", 5120)]
        read = await client.read_resource(str(links[0].uri))
        (contents,) = read.contents
        assert isinstance(contents, types.BlobResourceContents)
        assert base64.b64decode(contents.blob) == bytes(range(256)) * 20
        with pytest.raises(MCPError):
            await client.read_resource("corral://session/files/..%2F..%2Fetc%2Fpasswd")
        with pytest.raises(MCPError):
            await client.read_resource("corral://session/files/missing.txt")


async def test_code_interpreter_finds_a_source_under_its_own_name(real_engine: Engine) -> None:
    # Real workers: the worker puts each source in its folder under the source's name.
    async with Client(build_server(real_engine), mode="legacy") as client:
        added = await call(client, "source_add", {"content": "n\n2\n5\n", "filename": "s.csv"})
        source_id = added.structured_content["id"]
        used = await call(
            client,
            "code_interpreter",
            {
                "summary": "s",
                "sourceIds": [source_id],
                "code": f"(open('s.csv').read(), input_assets[{source_id!r}]['name'])",
            },
        )
    assert used.structured_content["result"] == {"text/plain": repr(("n\n2\n5\n", "s.csv"))}
