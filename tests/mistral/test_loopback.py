"""End to end over a real HTTP server on 127.0.0.1: settings, client, tools, loader, chat."""

from __future__ import annotations

import json
import logging

import anyio
import httpx
import pytest

from corral.mistral import ChatSession, MistralClient, MistralSettings, register_mistral_tools
from corral.tools import ToolRegistry

from .fake_mistral import (
    EXTRA_FORBIDDEN,
    SIGNED_URL,
    FakeMistral,
    Reply,
    call_reply,
    completion,
    conversation,
    execution,
    message_output,
    tool_call,
)
from .world import populate

pytestmark = [pytest.mark.anyio, pytest.mark.network]


async def test_everything_over_loopback(
    fake: FakeMistral, loopback: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    populate(fake)
    toml = {"mistral": {"connectorTools": {"autoLoad": ["notion"]}}}
    env = {"MISTRAL_API_KEY": "test-key", "MISTRAL_BASE_URL": loopback + "/v1/"}
    settings = MistralSettings.load(toml, env)
    assert settings.base_url == loopback

    chunks = [
        {"type": "text", "text": "[0, 1, 1, 2]"},
        {"type": "file_url", "file_url": SIGNED_URL, "file_name": "p.png", "file_type": "png"},
    ]
    fake.conversations = [
        Reply(
            200, conversation([execution("code_interpreter", {"result": chunks, "code": "fib()"})])
        ),
        Reply(200, conversation([message_output()])),
    ]
    fake.calls[("o1", "search_messages")] = call_reply([{"type": "text", "text": "3 mails"}])
    fake.chat = [
        Reply(
            200,
            completion(tool_calls=[tool_call("mistral_connector_load", {"connector": "outlook"})]),
        ),
        Reply(200, completion(tool_calls=[tool_call("search_messages__outlook", {"query": "q"})])),
        Reply(200, completion("3 mails.")),
    ]

    with anyio.fail_after(10):
        async with MistralClient.from_settings(settings) as client:
            registry = ToolRegistry()
            loader = await register_mistral_tools(registry, settings, client)
            assert loader is not None
            assert loader.loaded() == {"notion": ["search_messages", "create_page"]}

            code = await registry.call("mistral_code_interpreter", {"prompt": "fib"})
            assert SIGNED_URL in code.text
            assert code.structured is not None
            assert SIGNED_URL in json.dumps(code.structured)
            assert SIGNED_URL not in json.dumps(code.to_dict()["details"])

            search = await registry.call("web_search", {"query": "python", "premium": True})
            assert search.details["skipped"] is True

            out: list[str] = []
            answer = await ChatSession(registry, client, output=out.append).send("mail?")
            assert answer == "3 mails."
            assert "search_messages__outlook" in registry.active_names()
            assert fake.bodies("/v1/chat/completions")[2]["messages"][-1]["content"] == "3 mails"

            # The guard answers a forcing body the way the live endpoint does.
            async with httpx.AsyncClient() as raw:
                rejected = await raw.post(
                    loopback + "/v1/conversations",
                    json={"messages": []},
                    headers={"Authorization": "Bearer test-key", "Accept": "application/json"},
                )
            assert rejected.status_code == 422
            assert rejected.json() == EXTRA_FORBIDDEN

    assert "SECRET" not in caplog.text
    assert "test-key" not in caplog.text
    assert [b["tools"] for b in fake.bodies("/v1/conversations")[:2]] == [
        [{"type": "code_interpreter"}],
        [{"type": "web_search_premium"}],
    ]
