"""The connector loader: load, unload, reload, names, idempotence and state.

What each must do is docs/mistral.md §4.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from corral.errors import ToolError
from corral.mistral import ConnectorLoader, MistralClient, MistralSettings, register_mistral_tools
from corral.tools import Tool, ToolContext, ToolRegistry, ToolResult, export_tools

from .fake_mistral import FakeMistral, Reply, call_reply, connector_item, error_body, remote_tool
from .world import UNAUTHENTICATED, populate

pytestmark = pytest.mark.anyio

STATIC = ["code_interpreter", "mistral_code_interpreter", "web_search"]
LOADER = ["mistral_connector_load", "mistral_connector_unload", "mistral_connector_reload"]


def local_code_interpreter() -> Tool:
    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.ok("local")

    return Tool(
        name="code_interpreter",
        description="corral's local interpreter (stand-in)",
        parameters={"type": "object", "properties": {"code": {"type": "string"}}},
        handler=handler,
    )


@pytest.fixture
async def session(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> tuple[ToolRegistry, ConnectorLoader, list[list[str]]]:
    """A session with the world's connectors, plus a log of declared-tool changes."""
    populate(fake)
    registry.register(local_code_interpreter())
    loader = await register_mistral_tools(registry, settings, client)
    assert loader is not None
    changes: list[list[str]] = []
    registry.add_listener(lambda: changes.append(registry.active_names()))
    return registry, loader, changes


Session = tuple[ToolRegistry, ConnectorLoader, list[list[str]]]


async def load(registry: ToolRegistry, connector: str) -> ToolResult:
    return await registry.call("mistral_connector_load", {"connector": connector})


async def test_start_registers_the_loader_with_the_authenticated_connectors(
    session: Session,
) -> None:
    registry, loader, changes = session
    assert registry.active_names() == STATIC + LOADER
    assert [c.name for c in loader.connectors()] == ["outlook", "notion"]
    description = registry.get("mistral_connector_load").description
    assert (
        "- outlook — Read, search and send Outlook mail.\n- notion — Notion pages." in description
    )
    for excluded in ("calendar", "drive", "crm_http", "broken"):
        assert excluded not in description
    namespace = registry.get("mistral_connector_reload").namespace
    assert namespace is not None
    assert namespace.name == "mistral_connectors"
    assert changes == []


async def test_load_registers_deferred_then_activates_with_collision_names(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, changes = session
    result = await load(registry, "outlook")
    assert not result.is_error
    assert result.text == (
        'Loaded 3 tools from connector "outlook" (namespace mistral_cn_outlook):\n'
        "- search_messages: Search the mailbox.\n"
        "- send_message: Send an email from the signed-in account.\n"
        "- web_search__outlook: Search the web from Outlook.\n"
        "They can be called from your next step."
    )
    new = ["search_messages", "send_message", "web_search__outlook"]
    assert result.details == {"connector": "outlook", "tools": new, "count": 3}
    assert registry.active_names() == STATIC + LOADER + new
    assert changes == [STATIC + LOADER + new]  # one notification for the whole load
    tool = registry.get("search_messages")
    assert tool.namespace is not None
    assert (tool.namespace.name, tool.namespace.aliases) == ("mistral_cn_outlook", ("outlook",))
    assert tool.namespace.description == "Read, search and send Outlook mail."
    assert tool.annotations.read_only_hint is True
    assert tool.annotations.title == "Search messages"
    assert tool.parameters == fake.tools["o1"][0]["inputSchema"]  # type: ignore[index]
    exported = export_tools([tool], "mcp")[0]
    assert exported["annotations"] == {
        "title": "Search messages",
        "readOnlyHint": True,
        "destructiveHint": False,
        "openWorldHint": True,
    }
    assert registry.get("web_search").namespace.name == "mistral"  # type: ignore[union-attr]


async def test_names_collide_across_connectors_and_take_numbers(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, _ = session
    await load(registry, "outlook")
    result = await load(registry, "notion")
    assert result.details["tools"] == ["search_messages__notion", "create_page"]
    fake.connectors.append(connector_item("x1", "extra"))
    fake.tools["x1"] = [remote_tool("search_messages"), remote_tool("search_messages__notion")]
    await registry.call("mistral_connector_reload", {})
    extra = await load(registry, "extra")
    assert extra.details["tools"] == ["search_messages__extra", "search_messages__notion__extra"]


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        (["web_search__outlook"], "web_search__outlook_2"),
        (["web_search__outlook", "web_search__outlook_2"], "web_search__outlook_3"),
    ],
)
async def test_the_suffixed_name_takes_a_number_when_taken_too(
    fake: FakeMistral,
    client: MistralClient,
    settings: MistralSettings,
    registry: ToolRegistry,
    held: list[str],
    expected: str,
) -> None:
    fake.connectors = [connector_item("o1", "outlook")]
    fake.tools["o1"] = [remote_tool("web_search"), remote_tool("send")]
    stand_in = local_code_interpreter()
    for name in held:  # e.g. MCP-proxied tools registered before the loader ran
        registry.register(
            Tool(
                name=name, description="", parameters=stand_in.parameters, handler=stand_in.handler
            )
        )
    await register_mistral_tools(registry, settings, client)
    result = await load(registry, "outlook")
    assert result.details["tools"] == [expected, "send"]
    assert registry.get(held[0]).handler is stand_in.handler  # never shadowed


async def test_load_is_idempotent_and_fetches_nothing_the_second_time(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, changes = session
    first = await load(registry, "outlook")
    fetches = len(fake.requests)
    second = await load(registry, "outlook")
    assert second.text == first.text
    assert len(fake.requests) == fetches
    assert len(changes) == 1


async def test_load_by_id_is_a_fallback(session: Session) -> None:
    registry, loader, _ = session
    result = await load(registry, "n1")
    assert result.details["connector"] == "notion"
    assert loader.loaded() == {"notion": ["search_messages", "create_page"]}


async def test_unload_hides_and_keeps_names_reserved(session: Session, fake: FakeMistral) -> None:
    registry, loader, changes = session
    await load(registry, "outlook")
    result = await registry.call("mistral_connector_unload", {"connector": "outlook"})
    assert result.text == (
        'Unloaded 3 tools from "outlook": search_messages, send_message, web_search__outlook.'
    )
    assert registry.active_names() == STATIC + LOADER
    assert changes[-1] == STATIC + LOADER
    assert len(changes) == 2  # one for the load, one for the unload
    assert registry.exposure("search_messages") == "hidden"
    assert registry.is_taken("search_messages")
    call = await registry.call("search_messages", {"query": "q"})
    assert call.error is not None
    assert call.error["kind"] == "unknown_tool"
    assert "call mistral_connector_load" in call.text
    assert loader.loaded() == {}
    again = await registry.call("mistral_connector_unload", {"connector": "outlook"})
    assert not again.is_error
    assert again.text == '"outlook" is not loaded.'


async def test_load_after_unload_refetches_and_reuses_names(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, _ = session
    await load(registry, "outlook")
    await registry.call("mistral_connector_unload", {"connector": "outlook"})
    fake.tools["o1"] = [
        *fake.tools["o1"],  # type: ignore[misc]
        remote_tool("code_interpreter", "New since the unload."),
    ]
    fetches = sum(r.path == "/v1/connectors/o1/tools" for r in fake.requests)
    result = await load(registry, "outlook")
    assert sum(r.path == "/v1/connectors/o1/tools" for r in fake.requests) == fetches + 1
    assert result.details["tools"] == [
        "search_messages",
        "send_message",
        "web_search__outlook",
        "code_interpreter__outlook",
    ]
    assert registry.exposure("search_messages") == "deferred"
    assert "search_messages" in registry.active_names()


async def test_connector_tool_calls_fold_results_and_carry_is_error(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, _ = session
    await load(registry, "outlook")
    fake.calls[("o1", "web_search")] = call_reply(
        [{"type": "text", "text": "hit 1"}, {"type": "image", "data": "x"}]
    )
    ok = await registry.call("web_search__outlook", {"query": "q", "folder": None})
    assert ok.text == "hit 1\n[image content omitted]"
    assert ok.details == {
        "tool": "web_search__outlook",
        "connector": "outlook",
        "remoteTool": "web_search",
        "isError": False,
    }
    assert ok.usage is None
    assert fake.requests[-1].path == "/v1/connectors/o1/tools/web_search/call"
    assert fake.requests[-1].json == {"arguments": {"query": "q", "folder": None}}

    fake.calls[("o1", "send_message")] = call_reply(
        [{"type": "text", "text": "quota exceeded"}], is_error=True
    )
    failed = await registry.call("send_message", {"query": "q"})
    assert failed.is_error
    assert failed.text == "quota exceeded"
    assert failed.details["isError"] is True

    fake.calls[("o1", "search_messages")] = call_reply(
        [{"type": "text", "text": "t"}], metadata=False
    )
    plain = await registry.call("search_messages", {"query": "q"})
    assert not plain.is_error


async def test_connector_calls_validate_and_map_http_errors(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, _ = session
    await load(registry, "outlook")
    invalid = await registry.call("search_messages", {"folder": 3})
    assert invalid.error is not None
    assert invalid.error["kind"] == "invalid_input"
    assert not any(r.path.endswith("/call") for r in fake.requests)

    fake.calls[("o1", "search_messages")] = Reply(401, UNAUTHENTICATED)
    unauth = await registry.call("search_messages", {"query": "q"})
    assert unauth.text == (
        'Connector "outlook" is not authenticated (HTTP 401: No credentials found). '
        "Connect it in Mistral, then call mistral_connector_reload."
    )
    fake.calls[("o1", "search_messages")] = Reply(503, error_body("busy"))
    busy = await registry.call("search_messages", {"query": "q"})
    assert busy.error == {
        "kind": "server",
        "status": 503,
        "message": "Mistral rejected the request (HTTP 503): busy",
    }
    fake.calls[("o1", "search_messages")] = Reply(200, {"no": "content"})
    unreadable = await registry.call("search_messages", {"query": "q"})
    assert unreadable.error is not None
    assert unreadable.error["kind"] == "unreadable_result"


async def test_k2_unknown_and_unauthenticated_connectors(session: Session) -> None:
    registry, _, changes = session
    unknown = await load(registry, "jira")
    assert unknown.error is not None
    assert unknown.error["kind"] == "unknown_connector"
    assert unknown.text == 'Unknown connector "jira". Loadable connectors: outlook, notion.'
    calendar = await load(registry, "calendar")
    assert calendar.text == (
        'Connector "calendar" is not authenticated (HTTP 401: No credentials found). '
        "Connect it in Mistral, then call mistral_connector_reload."
    )
    drive = await load(registry, "drive")
    assert drive.error is not None
    assert drive.error["kind"] == "auth"
    assert changes == []


async def test_a_401_at_load_time_gives_the_unauthenticated_text(
    session: Session, fake: FakeMistral
) -> None:
    registry, _, _ = session
    fake.tools["o1"] = Reply(401, {"detail": "No credentials found"})
    result = await load(registry, "outlook")
    assert result.error is not None
    assert result.error["status"] == 401
    assert (
        'Connector "outlook" is not authenticated (HTTP 401: No credentials found).' in result.text
    )
    assert registry.active_names() == STATIC + LOADER


async def test_reload_lists_again_and_marks_loaded(session: Session, fake: FakeMistral) -> None:
    registry, _, changes = session
    await load(registry, "outlook")
    before = len(changes)
    result = await registry.call("mistral_connector_reload", {})
    assert result.text == (
        "Connectors available to mistral_connector_load (2):\n"
        "- outlook — Read, search and send Outlook mail. (loaded)\n"
        "- notion — Notion pages."
    )
    assert len(changes) == before  # same description: nothing to announce
    fake.tools["c1"] = [remote_tool("events")]  # calendar got connected meanwhile
    result = await registry.call("mistral_connector_reload", {})
    assert "- calendar — (no description)" in result.text
    assert len(changes) == before + 1
    assert "- calendar" in registry.get("mistral_connector_load").description
    assert "mistral_connector_load" in registry.active_names()


async def test_k5_a_failed_listing_recovers_on_reload(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> None:
    populate(fake)
    fake.list_failures = [Reply(500, error_body("listing down"))]
    loader = await register_mistral_tools(registry, settings, client)
    assert loader is not None
    description = registry.get("mistral_connector_load").description
    assert "The connector list is unavailable" in description
    assert "mistral_connector_reload to retry" in description
    assert registry.active_names() == ["mistral_code_interpreter", "web_search", *LOADER]
    unknown = await load(registry, "outlook")
    assert "The connector list is unavailable" in unknown.text
    changes: list[int] = []
    registry.add_listener(lambda: changes.append(1))
    result = await registry.call("mistral_connector_reload", {})
    assert not result.is_error
    assert changes == [1]  # the description changed: list_changed goes out
    assert "- outlook" in registry.get("mistral_connector_load").description
    fake.list_failures = [Reply(500, error_body("down again"))]
    failed = await registry.call("mistral_connector_reload", {})
    assert failed.error is not None
    assert failed.error["kind"] == "unavailable"


async def test_auto_load_runs_silently_at_start(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    populate(fake)
    warnings: list[str] = []
    settings = MistralSettings(
        api_key="test-key", base_url=client.base_url, auto_load=("notion", "calendar", "nope")
    )
    loader = await register_mistral_tools(registry, settings, client, warn=warnings.append)
    assert loader is not None
    assert loader.loaded() == {"notion": ["search_messages", "create_page"]}
    assert registry.active_names()[-2:] == ["search_messages", "create_page"]
    assert warnings == [
        "connector check failed for 'broken'; excluded until reload",
        "autoLoad: connector 'calendar' is unknown or not authenticated; skipped",
        "autoLoad: connector 'nope' is unknown or not authenticated; skipped",
    ]


async def test_warnings_are_issued_once_per_session(session: Session, fake: FakeMistral) -> None:
    registry, loader, _ = session
    warnings: list[str] = []
    loader._warn_sink = warnings.append
    fake.tools["o1"] = [remote_tool("bad", inputSchema={"type": "object", "properties": 3})]
    await load(registry, "outlook")
    await registry.call("mistral_connector_unload", {"connector": "outlook"})
    await load(registry, "outlook")
    assert len([w for w in warnings if "'bad' skipped" in w]) == 1


async def test_export_and_restore_keep_renames_stable(
    session: Session, fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    registry, loader, _ = session
    await load(registry, "outlook")
    await load(registry, "notion")
    state = json.loads(json.dumps(loader.export_state()))
    assert state["loaded"] == ["outlook", "notion"]
    assert ["notion", "search_messages", "search_messages__notion"] in state["names"]

    # A resumed session: notion must keep its rename although outlook is not loaded first.
    resumed = ToolRegistry()
    resumed.register(local_code_interpreter())
    new_loader = await register_mistral_tools(resumed, settings, client)
    assert new_loader is not None
    await new_loader.restore_state({"loaded": ["notion"], "names": state["names"]})
    assert new_loader.loaded() == {"notion": ["search_messages__notion", "create_page"]}
    await new_loader.load("outlook")
    assert new_loader.loaded()["outlook"][0] == "search_messages"


@pytest.mark.parametrize(
    "state",
    [{"names": "x"}, {"loaded": {}}, {"names": [["a", "b"]]}, {"names": [["a", "b", 3]]}],
)
async def test_restore_rejects_malformed_state(session: Session, state: dict[str, Any]) -> None:
    _, loader, _ = session
    with pytest.raises(ToolError):
        await loader.restore_state(state)


async def test_restore_drops_names_taken_by_other_tools(session: Session) -> None:
    registry, loader, _ = session
    await loader.restore_state(
        {"loaded": ["outlook"], "names": [["outlook", "send_message", "web_search"]]}
    )
    assert loader.loaded()["outlook"][1] == "send_message"
    assert registry.get("web_search").namespace.name == "mistral"  # type: ignore[union-attr]


async def test_loader_edge_cases(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> None:
    fake.connectors = [connector_item("o1", "outlook"), connector_item("n1", "notion")]
    fake.tools["o1"] = [remote_tool("a"), remote_tool("a"), {"name": 3}, "junk"]
    fake.tools["n1"] = Reply(500, error_body("tools down"))
    warnings: list[str] = []
    settings = MistralSettings(api_key="test-key", base_url=client.base_url, auto_load=("notion",))
    loader = await register_mistral_tools(registry, settings, client, warn=warnings.append)
    assert loader is not None
    assert warnings == [
        "autoLoad: connector 'notion' could not be loaded: "
        "Mistral rejected the request (HTTP 500): tools down"
    ]
    failed = await load(registry, "notion")
    assert failed.error == {
        "kind": "server",
        "status": 500,
        "message": "Mistral rejected the request (HTTP 500): tools down",
    }
    loaded = await load(registry, "outlook")  # duplicates and nameless items are skipped
    assert loaded.details["tools"] == ["a"]
    assert loaded.text.startswith('Loaded 1 tool from connector "outlook"')
    await loader.restore_state({"loaded": [7, "notion"], "names": []})
    assert warnings[-1] == "restore: connector 'notion' could not be loaded"


async def test_no_authenticated_connector_is_said_in_the_description(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> None:
    fake.connectors = [connector_item("d1", "drive", authenticated=False)]
    await register_mistral_tools(registry, settings, client)
    description = registry.get("mistral_connector_load").description
    assert "No authenticated connector was found." in description


async def test_parallel_loads_fetch_once(session: Session, fake: FakeMistral) -> None:
    registry, _, changes = session
    results: list[ToolResult] = []

    async def one() -> None:
        results.append(await load(registry, "outlook"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)
    assert sum(r.path == "/v1/connectors/o1/tools" for r in fake.requests) == 1
    assert len({r.text for r in results}) == 1
    assert len(changes) == 1
