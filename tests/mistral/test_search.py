"""``web_search`` against the fake: variants C1, C3, C5, C7, C8 and premium routing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.mistral import (
    MistralClient,
    MistralSettings,
    instructions_for,
    parse_web_search,
    web_search_tool,
)
from corral.tools import ToolRegistry, ToolResult

from .fake_mistral import FakeMistral, Reply, conversation, execution, message_output

pytestmark = pytest.mark.anyio

QUERY = "latest CPython release"
MODEL = "mistral-small-latest"
HIT = {
    "url": "https://www.python.org/downloads/",
    "title": "Download Python",
    "description": None,
    "snippets": ["Latest Python releases"],
}


async def run(client: MistralClient, settings: MistralSettings, **arguments: Any) -> ToolResult:
    registry = ToolRegistry()
    registry.register(web_search_tool(client, settings))
    return await registry.call("web_search", {"query": QUERY, **arguments})


def search_exec(result: Any, name: str = "web_search") -> dict[str, Any]:
    return execution(name, {"result": result})


async def test_the_spec_example_renders_exactly(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    entry = search_exec(json.dumps({"r1": HIT}))
    fake.conversations.append(Reply(200, conversation([entry, message_output()])))
    result = await run(client, settings)
    assert result.text == (
        f'Web search (model {MODEL}): 1 result for "{QUERY}"\n'
        "1. Download Python\n"
        "   https://www.python.org/downloads/\n"
        "   Latest Python releases"
    )
    assert result.structured == {
        "skipped": False,
        "query": QUERY,
        "hits": [
            {
                "url": "https://www.python.org/downloads/",
                "title": "Download Python",
                "snippets": ["Latest Python releases"],
            }
        ],
    }
    assert result.details == {
        "tool": "web_search",
        "model": MODEL,
        "query": QUERY,
        "executed": True,
        "skipped": False,
        "hitCount": 1,
    }
    (body,) = fake.bodies("/v1/conversations")
    assert body["tools"] == [{"type": "web_search"}]
    assert body["inputs"] == [{"role": "user", "content": QUERY}]
    assert body["instructions"] == instructions_for("web_search")


async def test_c1_skip_is_not_an_empty_result(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([message_output("python.org has it")])))
    result = await run(client, settings)
    assert not result.is_error
    assert result.text == (
        f'Web search was skipped by Mistral: no search was executed for "{QUERY}". '
        "This is not an empty result; retrying may succeed."
    )
    assert result.structured == {"skipped": True, "query": QUERY, "hits": []}
    assert result.details["executed"] is False
    assert result.details["skipped"] is True


async def test_c3_empty_hit_map(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([search_exec("{}")])))
    result = await run(client, settings)
    assert not result.is_error
    assert result.text == f'Web search returned no results for "{QUERY}".'
    assert result.details["hitCount"] == 0
    assert result.details["skipped"] is False


async def test_c8_hits_are_mapped_defensively(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    hit_map = {
        "a": {**HIT, "rank": 1, "date": "2026", "source": "x"},
        "b": {"url": "https://b.example", "description": "About B", "snippets": ["s", 3, None]},
        "c": {"url": "https://www.python.org/downloads/", "title": "duplicate"},
        "d": "not an object",
        "e": {"title": "no url"},
        "f": {"url": "https://f.example", "title": 7, "snippets": "nope"},
    }
    fake.conversations.append(Reply(200, conversation([search_exec(json.dumps(hit_map))])))
    result = await run(client, settings)
    assert result.structured is not None
    assert result.structured["hits"] == [
        {
            "url": "https://www.python.org/downloads/",
            "title": "Download Python",
            "snippets": ["Latest Python releases"],
        },
        {"url": "https://b.example", "title": "", "description": "About B", "snippets": ["s"]},
        {"url": "https://f.example", "title": "", "snippets": []},
    ]
    assert "2. https://b.example\n   https://b.example\n   About B\n   s" in result.text
    assert result.text.startswith(f'Web search (model {MODEL}): 3 results for "{QUERY}"')
    for hidden in ("duplicate", "not an object", "no url", "rank"):
        assert hidden not in result.text


async def test_an_already_decoded_hit_map_is_used_as_is(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([search_exec({"r1": HIT})])))
    assert (await run(client, settings)).details["hitCount"] == 1


async def test_c5_several_executions_concatenate_and_dedupe(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    outputs = [
        search_exec(json.dumps({"x": {"url": "https://1.example"}})),
        execution("code_interpreter", {"result": [{"type": "text", "text": "ignored"}]}),
        search_exec(
            json.dumps({"y": {"url": "https://2.example"}, "z": {"url": "https://1.example"}})
        ),
    ]
    fake.conversations.append(Reply(200, conversation(outputs)))
    result = await run(client, settings)
    assert result.structured is not None
    assert [h["url"] for h in result.structured["hits"]] == [
        "https://1.example",
        "https://2.example",
    ]
    assert "ignored" not in result.text


@pytest.mark.parametrize("payload", ["not json", 17, "[]", "[1, 2]", None, ["x"], '{"a": 1}'])
async def test_c7_unreadable_search_results(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, payload: Any
) -> None:
    fake.conversations.append(Reply(200, conversation([search_exec(payload)])))
    result = await run(client, settings)
    assert result.error == {
        "kind": "unreadable_result",
        "message": "Mistral returned a web_search result corral could not read.",
    }
    assert result.details == {"tool": "web_search", "model": MODEL, "query": QUERY}


@pytest.mark.parametrize("entry_name", ["web_search_premium", "web_search"])
async def test_premium_routes_to_web_search_premium(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, entry_name: str
) -> None:
    entry = search_exec(json.dumps({"r1": HIT}), name=entry_name)
    fake.conversations.append(Reply(200, conversation([entry])))
    result = await run(client, settings, premium=True)
    (body,) = fake.bodies("/v1/conversations")
    assert body["tools"] == [{"type": "web_search_premium"}]
    assert body["instructions"] == (
        "Always use the web_search_premium tool to search the web before answering. "
        "Never answer from memory."
    )
    assert result.details["tool"] == "web_search_premium"
    assert result.details["hitCount"] == 1


async def test_premium_false_is_plain_search(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([search_exec("{}")])))
    await run(client, settings, premium=False)
    assert fake.bodies("/v1/conversations")[0]["tools"] == [{"type": "web_search"}]


async def test_a_blank_query_sends_nothing(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    result = await run(client, settings, query=" ")
    assert result.error == {"kind": "invalid_input", "message": "query must be a non-empty string."}
    assert fake.requests == []


async def test_premium_must_be_boolean(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    result = await run(client, settings, premium="yes")
    assert result.error is not None
    assert result.error["kind"] == "invalid_input"
    assert fake.requests == []


async def test_descriptions_warn_about_billing(
    client: MistralClient, settings: MistralSettings
) -> None:
    tool = web_search_tool(client, settings)
    premium = tool.parameters["properties"]["premium"]
    for text in (tool.description, premium["description"]):
        assert "billed per use by Mistral" in text
        assert "premium search costs extra per call" in text
    assert premium["default"] is False
    assert tool.parameters["additionalProperties"] is False
    assert tool.namespace is not None
    assert tool.namespace.name == "mistral"


def test_parse_is_pure() -> None:
    response = conversation([search_exec(json.dumps({"r1": HIT}))])
    first = parse_web_search(response, query=QUERY, model=MODEL)
    assert parse_web_search(response, query=QUERY, model=MODEL) == first
