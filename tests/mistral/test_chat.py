"""The ``corral chat`` host loop against the fake chat completions endpoint."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from corral.mistral import (
    ChatSession,
    MistralClient,
    MistralSettings,
    register_mistral_tools,
    run_chat,
)
from corral.tools import Tool, ToolContext, ToolRegistry, ToolResult

from .conftest import BASE_URL
from .fake_mistral import (
    FakeMistral,
    Reply,
    call_reply,
    completion,
    error_body,
    tool_call,
)
from .world import populate

pytestmark = pytest.mark.anyio


def declared(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", []) if t["type"] == "function"]


def lines(*items: str | None) -> Any:
    queue = list(items)

    async def read(prompt: str) -> str | None:
        assert prompt == "you> "
        return queue.pop(0) if queue else None

    return read


@pytest.fixture
async def chat_registry(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> ToolRegistry:
    populate(fake)
    await register_mistral_tools(registry, settings, client)
    return registry


async def test_loaded_tools_are_declared_on_the_next_request(
    fake: FakeMistral, client: MistralClient, chat_registry: ToolRegistry
) -> None:
    fake.chat = [
        Reply(
            200,
            completion(
                tool_calls=[tool_call("mistral_connector_load", {"connector": "outlook"}, "c1")]
            ),
        ),
        Reply(200, completion("", [tool_call("search_messages", {"query": "invoices"}, "c2")])),
        Reply(200, completion("You have 2 invoices.")),
    ]
    fake.calls[("o1", "search_messages")] = call_reply([{"type": "text", "text": "2 invoices"}])
    out: list[str] = []
    session = ChatSession(chat_registry, client, output=out.append, model="mistral-large-latest")
    answer = await session.send("Any invoices in my mail?")
    assert answer == "You have 2 invoices."
    first, second, third = fake.bodies("/v1/chat/completions")
    assert first["model"] == "mistral-large-latest"
    assert "search_messages" not in declared(first)
    assert "mistral_connector_load" in declared(first)
    assert "search_messages" in declared(second)
    assert "web_search__outlook" in declared(second)
    load_result = second["messages"][-1]
    assert load_result["role"] == "tool"
    assert load_result["tool_call_id"] == "c1"
    assert load_result["name"] == "mistral_connector_load"
    assert "- search_messages: Search the mailbox." in load_result["content"]
    assert third["messages"][-1]["content"] == "2 invoices"
    assert second["messages"][1]["tool_calls"][0]["function"]["arguments"] == json.dumps(
        {"connector": "outlook"}
    )
    assert out == [
        "[tool] mistral_connector_load",
        "[tool] search_messages",
        "You have 2 invoices.",
    ]


async def test_server_tools_are_filtered_with_one_warning_per_session(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    fake.chat = [Reply(200, completion("one")), Reply(200, completion("two"))]
    out: list[str] = []
    server_tools = [
        {"type": "web_search"},
        {"type": "image_generation"},
        {"type": "code_interpreter"},
    ]
    session = ChatSession(registry, client, output=out.append, server_tools=server_tools)
    await session.send("a")
    await session.send("b")
    for body in fake.bodies("/v1/chat/completions"):
        assert body["tools"] == [{"type": "image_generation"}]
    warnings = [line for line in out if line.startswith("warning:")]
    assert warnings == [
        "warning: Mistral chat completions does not support the server tool 'web_search' "
        "(it is Conversations-only); dropped. Use the web_search / mistral_code_interpreter tool.",
        "warning: Mistral chat completions does not support the server tool 'code_interpreter' "
        "(it is Conversations-only); dropped. Use the web_search / mistral_code_interpreter tool.",
    ]
    second = fake.bodies("/v1/chat/completions")[1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]


async def test_no_tools_means_no_tools_key(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    fake.chat = [Reply(200, completion("hi"))]
    await ChatSession(registry, client, output=lambda _: None, system="Be brief.").send("hello")
    (body,) = fake.bodies("/v1/chat/completions")
    assert "tools" not in body
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


async def test_tool_errors_reach_the_model_as_tool_messages(
    fake: FakeMistral, client: MistralClient, chat_registry: ToolRegistry
) -> None:
    fake.chat = [
        Reply(
            200,
            completion(
                tool_calls=[
                    tool_call("send_message", {"query": "x"}, "c1"),
                    tool_call("web_search", "{not json", "c2"),
                    tool_call("mistral_connector_load", {"connector": "outlook"}, "c3"),
                ]
            ),
        ),
        Reply(200, completion(tool_calls=[tool_call("send_message", {"query": "x"}, "c4")])),
        Reply(200, completion("Sending failed.")),
    ]
    fake.calls[("o1", "send_message")] = call_reply(
        [{"type": "text", "text": "mailbox full"}], is_error=True
    )
    out: list[str] = []
    await ChatSession(chat_registry, client, output=out.append).send("mail bob")
    second = fake.bodies("/v1/chat/completions")[1]
    unknown, bad_json, _ = second["messages"][-3:]
    assert unknown["content"].startswith("Unknown tool: send_message.")
    assert "mistral_connector_load" in unknown["content"]
    assert bad_json["content"] == "The arguments for web_search are not valid JSON."
    third = fake.bodies("/v1/chat/completions")[2]
    assert third["messages"][-1]["content"] == "mailbox full"
    assert "[tool] send_message failed: tool_error" in out
    assert not any(r.path == "/v1/conversations" for r in fake.requests)


async def test_1800_is_explained_and_the_turn_rolled_back(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    fake.chat = [
        Reply(400, error_body("WebSearchTool connector is not supported", code="1800")),
        Reply(200, completion("fine")),
    ]
    out: list[str] = []
    session = ChatSession(
        registry,
        client,
        output=out.append,
        server_tools=[{"type": "connector", "connector_id": "x"}],
    )
    assert await session.send("search") is None
    assert out == [
        "error: Mistral chat completions rejects the server tool 'connector' (HTTP 400, code "
        "1800: WebSearchTool connector is not supported); use the web_search or "
        "mistral_code_interpreter tool instead."
    ]
    assert session.messages == []
    assert await session.send("again") == "fine"


async def test_an_unreadable_completion_is_reported(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    fake.chat = [
        Reply(200, {"choices": []}),
        Reply(200, completion(tool_calls=[{"id": "x", "function": {"arguments": "{}"}}])),
    ]
    out: list[str] = []
    session = ChatSession(registry, client, output=out.append)
    await session.send("a")
    await session.send("b")
    assert out == ["error: Mistral returned a chat completions result corral could not read."] * 2


async def test_chunked_content_and_dict_arguments_are_normalised(
    fake: FakeMistral, client: MistralClient, chat_registry: ToolRegistry
) -> None:
    raw_call = {"id": "c1", "function": {"name": "mistral_connector_reload", "arguments": {}}}
    fake.chat = [
        Reply(200, completion(tool_calls=[raw_call])),
        Reply(
            200,
            completion([{"type": "thinking", "thinking": []}, {"type": "text", "text": "done"}]),
        ),
    ]
    assert await ChatSession(chat_registry, client, output=lambda _: None).send("x") == "done"
    second = fake.bodies("/v1/chat/completions")[1]
    assert second["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_a_turn_stops_after_max_steps(
    fake: FakeMistral, client: MistralClient, chat_registry: ToolRegistry
) -> None:
    loop = Reply(200, completion(tool_calls=[tool_call("mistral_connector_reload", {})]))
    fake.chat = [loop, loop, loop]
    out: list[str] = []
    session = ChatSession(chat_registry, client, output=out.append, max_steps=3)
    assert await session.send("x") is None
    assert out[-1] == "error: stopped after 3 model requests in one turn"
    assert session.messages == []


async def test_run_chat_reads_until_exit(
    fake: FakeMistral, client: MistralClient, chat_registry: ToolRegistry
) -> None:
    fake.chat = [Reply(200, completion("Hello!"))]
    out: list[str] = []
    await run_chat(
        chat_registry,
        client,
        input_fn=lines("/tools", "  ", "hi", "/exit", "never read"),
        output_fn=out.append,
    )
    assert out[0] == (
        "mistral_code_interpreter, web_search, mistral_connector_load, "
        "mistral_connector_unload, mistral_connector_reload"
    )
    assert out[1:] == ["Hello!"]
    (body,) = fake.bodies("/v1/chat/completions")
    assert body["model"] == "mistral-medium-latest"


async def test_run_chat_ends_at_end_of_input(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    out: list[str] = []
    await run_chat(registry, client, input_fn=lines(), output_fn=out.append)
    await run_chat(registry, client, input_fn=lines("/tools"), output_fn=out.append)
    assert out == ["(no tools)"]
    assert fake.requests == []


async def test_run_chat_without_a_key_says_so(fake: FakeMistral) -> None:
    out: list[str] = []
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        await run_chat(
            ToolRegistry(),
            MistralClient(None, BASE_URL, http=http),
            input_fn=lines("hi"),
            output_fn=out.append,
        )
    assert out == ["error: MISTRAL_API_KEY is not set; Mistral tools are unavailable."]
    assert fake.requests == []


async def test_a_structured_only_result_reaches_the_model_as_json(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(structured={"answer": 42})

    registry.register(
        Tool(name="oracle", description="", parameters={"type": "object"}, handler=handler)
    )
    fake.chat = [
        Reply(200, completion(tool_calls=[tool_call("oracle", "")])),
        Reply(200, completion("42")),
    ]
    await ChatSession(registry, client, output=lambda _: None).send("?")
    assert fake.bodies("/v1/chat/completions")[1]["messages"][-1]["content"] == '{"answer": 42}'
