"""``mistral_code_interpreter`` against the fake: variants C1, C2, C4-C7, C9-C11."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from corral.mistral import (
    MistralClient,
    MistralSettings,
    instructions_for,
    mistral_code_interpreter_tool,
    parse_code_interpreter,
)
from corral.tools import ToolRegistry, ToolResult

from .conftest import BASE_URL
from .fake_mistral import (
    SIGNED_URL,
    TOOL_CHOICE_422,
    USAGE,
    FakeMistral,
    Reply,
    conversation,
    error_body,
    execution,
    message_output,
)

pytestmark = pytest.mark.anyio

PROMPT = "Plot the first 20 Fibonacci numbers as a PNG."
MODEL = "mistral-small-latest"


async def run(client: MistralClient, settings: MistralSettings, prompt: str = PROMPT) -> ToolResult:
    registry = ToolRegistry()
    registry.register(mistral_code_interpreter_tool(client, settings))
    return await registry.call("mistral_code_interpreter", {"prompt": prompt})


def code_exec(result: Any, **info: Any) -> dict[str, Any]:
    return execution("code_interpreter", {"result": result, **info})


async def test_request_body_is_exactly_the_spec(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([message_output()])))
    await run(client, settings)
    (body,) = fake.bodies("/v1/conversations")
    assert body == {
        "model": MODEL,
        "inputs": [{"role": "user", "content": PROMPT}],
        "tools": [{"type": "code_interpreter"}],
        "instructions": (
            "Always use the code_interpreter tool to run Python code before answering. "
            "Never answer from memory."
        ),
        "stream": False,
        "store": False,
    }
    assert body["instructions"] == instructions_for("code_interpreter")


async def test_c1_skip_reads_nothing_from_the_message(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([message_output("4, plot attached")])))
    result = await run(client, settings)
    assert not result.is_error
    assert result.text == (
        "The code interpreter did not run: Mistral skipped the tool execution. "
        "Nothing was executed; retrying may succeed."
    )
    assert result.structured == {"skipped": True, "executions": [], "chunks": []}
    assert result.details == {
        "tool": "code_interpreter",
        "model": MODEL,
        "prompt": PROMPT,
        "executed": False,
        "skipped": True,
        "chunkCount": 0,
    }
    assert "plot attached" not in json.dumps(result.to_dict())
    assert SIGNED_URL not in json.dumps(result.to_dict())


async def test_c2_ran_but_produced_no_output(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(200, conversation([code_exec([], code="x=1", code_output="")])))
    result = await run(client, settings)
    assert not result.is_error
    assert result.text == (
        "The code interpreter ran but produced no output.\n\n"
        f"Mistral code interpreter (model {MODEL}), execution 1 of 1\n"
        "Code:\n```python\nx=1\n```"
    )
    assert result.structured == {
        "skipped": False,
        "executions": [{"code": "x=1", "codeOutput": ""}],
        "chunks": [],
    }
    assert result.details["chunkCount"] == 0
    assert result.details["executed"] is True
    assert result.details["skipped"] is False


async def test_c4_chunks_reach_the_model_but_never_details_or_logs(
    fake: FakeMistral,
    client: MistralClient,
    settings: MistralSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    chunks = [
        {"type": "text", "text": "4"},
        {
            "type": "file_url",
            "file_url": SIGNED_URL,
            "file_name": "p.png",
            "file_type": "png",
            "summary": "plot",
        },
    ]
    entry = code_exec(chunks, code="print(2 + 2)\nplot()", code_output="4\n")
    fake.conversations.append(Reply(200, conversation([entry, message_output()])))
    result = await run(client, settings)
    assert result.text == (
        f"Mistral code interpreter (model {MODEL}), execution 1 of 1\n"
        "Code:\n```python\nprint(2 + 2)\nplot()\n```\n"
        "Output:\n4\n"
        "Result:\n4\n"
        "Files (signed links, short-lived):\n"
        f"- p.png (png): {SIGNED_URL}"
    )
    assert result.structured is not None
    assert result.structured["chunks"] == [
        {"type": "text", "text": "4"},
        {"type": "file_url", "fileUrl": SIGNED_URL, "fileName": "p.png", "fileType": "png"},
    ]
    assert result.details == {
        "tool": "code_interpreter",
        "model": MODEL,
        "prompt": PROMPT,
        "executed": True,
        "skipped": False,
        "chunkCount": 2,
    }
    assert result.usage == {**USAGE, "cost": 0}
    persisted = json.dumps(result.to_dict()["details"]) + json.dumps(result.to_mcp()["_meta"])
    for secret in ("SECRET", "files.example", "print(2 + 2)", "4\\n"):
        assert secret not in persisted
    assert "SECRET" not in caplog.text
    assert "print(2 + 2)" not in caplog.text


async def test_c5_several_executions_concatenate_in_order(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    outputs = [
        code_exec([{"type": "text", "text": "one"}], code="a"),
        execution("web_search", {"result": "{}"}),
        message_output(),
        code_exec([{"type": "text", "text": "two"}], code="b"),
    ]
    fake.conversations.append(Reply(200, conversation(outputs)))
    result = await run(client, settings)
    assert result.structured is not None
    assert [c["text"] for c in result.structured["chunks"]] == ["one", "two"]
    assert result.structured["executions"] == [{"code": "a"}, {"code": "b"}]
    assert "execution 1 of 2" in result.text
    assert "execution 2 of 2" in result.text
    assert result.text.index("one") < result.text.index("two")


async def test_an_entry_named_by_function_matches(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    entry = code_exec([{"type": "text", "text": "ok"}])
    entry["function"] = entry.pop("name")
    fake.conversations.append(Reply(200, conversation([entry])))
    assert "Result:\nok" in (await run(client, settings)).text


async def test_c6_unknown_chunks_are_dropped_and_counted(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    chunks = [
        {"type": "image_ref", "id": "UNKNOWN-ID"},
        {"text": "untyped"},
        42,
        {"type": "text", "text": 5},
        {"type": "file_url", "file_url": None},
        {"type": "text", "text": "ok"},
    ]
    fake.conversations.append(Reply(200, conversation([code_exec(chunks)])))
    result = await run(client, settings)
    assert result.structured is not None
    assert result.structured["chunks"] == [{"type": "text", "text": "ok"}]
    assert "Note: 5 output chunk(s) of an unrecognised type were omitted." in result.text
    dumped = json.dumps(result.to_dict())
    for unknown in ("UNKNOWN-ID", "image_ref", "untyped", "42"):
        assert unknown not in dumped


@pytest.mark.parametrize(
    "entry",
    [
        execution("code_interpreter", {"result": "oops"}),
        execution("code_interpreter", {"code": "x"}),
        execution("code_interpreter", {"result": None}),
        execution("code_interpreter", {"result": {"type": "text", "text": "oops"}}),
        execution("code_interpreter", None),
        execution("code_interpreter", "oops"),
    ],
)
async def test_c7_unreadable_payloads_fail_without_echoing_them(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, entry: dict[str, Any]
) -> None:
    good = code_exec([{"type": "text", "text": "fine"}])
    fake.conversations.append(Reply(200, conversation([good, entry])))
    result = await run(client, settings)
    assert result.is_error
    assert result.error == {
        "kind": "unreadable_result",
        "message": "Mistral returned a code_interpreter result corral could not read.",
    }
    assert "oops" not in json.dumps(result.to_dict())
    assert result.details == {"tool": "code_interpreter", "model": MODEL, "prompt": PROMPT}


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, text="not json", content_type="text/plain"),
        Reply(200, {"outputs": "nope"}),
        Reply(200, [1]),
    ],
)
async def test_c7_unreadable_bodies(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, reply: Reply
) -> None:
    fake.conversations.append(reply)
    result = await run(client, settings)
    assert result.error is not None
    assert result.error["kind"] == "unreadable_result"


@pytest.mark.parametrize("code", ["3004", 3004])
async def test_c9_3004_names_the_setting_and_the_default(fake: FakeMistral, code: Any) -> None:
    settings = MistralSettings(
        api_key="test-key", base_url=BASE_URL, search_model="mistral-large-4"
    )
    fake.conversations.append(
        Reply(400, error_body("Model does not support built-in connectors", code=code))
    )
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        result = await run(MistralClient.from_settings(settings, http=http), settings)
    assert result.is_error
    assert result.error == {
        "kind": "model_unsupported",
        "status": 400,
        "code": "3004",
        "message": (
            "The search model 'mistral-large-4' cannot run Mistral's built-in tools "
            "(HTTP 400, code 3004). Set mistral.knowledge.searchModel in corral.toml to a "
            "model that supports them; the default is mistral-small-latest."
        ),
    }
    assert result.details["model"] == "mistral-large-4"


async def test_c10_422_is_invalid_request_and_the_guard_never_trips(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings
) -> None:
    fake.conversations.append(Reply(422, TOOL_CHOICE_422))
    result = await run(client, settings)
    assert result.error == {
        "kind": "invalid_request",
        "status": 422,
        "message": "Mistral rejected the request (HTTP 422): body.completion_args.tool_choice: "
        "Input should be 'auto', 'none' or 'required'",
    }
    # The 422 above was scripted; the guard (which answers forcing bodies by itself) saw none.
    (body,) = fake.bodies("/v1/conversations")
    assert "completion_args" not in body
    assert "messages" not in body


@pytest.mark.parametrize(
    ("reply", "kind", "text"),
    [
        (
            Reply(401, error_body("Unauthorized", type="authentication_error")),
            "auth",
            "Mistral rejected the request (HTTP 401): Unauthorized",
        ),
        (
            Reply(429, error_body("Requests rate limit exceeded", code="1300")),
            "rate_limited",
            "Mistral rejected the request (HTTP 429): Requests rate limit exceeded",
        ),
        (
            Reply(500, text="upstream exploded", content_type="text/plain"),
            "server",
            "Mistral rejected the request (HTTP 500): upstream exploded",
        ),
        (Reply(404, {"detail": "Not Found"}), "not_found", "(HTTP 404): Not Found"),
        (Reply(409, error_body("conflict")), "http", "(HTTP 409): conflict"),
    ],
)
async def test_c11_other_http_errors(
    fake: FakeMistral,
    client: MistralClient,
    settings: MistralSettings,
    reply: Reply,
    kind: str,
    text: str,
) -> None:
    fake.conversations.append(reply)
    result = await run(client, settings)
    assert result.error is not None
    assert result.error["kind"] == kind
    assert result.error["status"] == reply.status
    assert text in result.text


async def test_c11_refused_connection(settings: MistralSettings) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
        result = await run(MistralClient("test-key", BASE_URL, http=http), settings)
    assert result.error == {
        "kind": "transport",
        "message": f"Could not reach Mistral at {BASE_URL}: connection refused",
    }


@pytest.mark.parametrize("prompt", ["", "   \n"])
async def test_a_blank_prompt_sends_nothing(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, prompt: str
) -> None:
    result = await run(client, settings, prompt)
    assert result.error == {
        "kind": "invalid_input",
        "message": "prompt must be a non-empty string.",
    }
    assert fake.requests == []


async def test_no_key_is_the_config_error(fake: FakeMistral, settings: MistralSettings) -> None:
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        result = await run(MistralClient(None, BASE_URL, http=http), settings)
    assert result.error == {
        "kind": "config",
        "message": "MISTRAL_API_KEY is not set; Mistral tools are unavailable.",
    }
    assert fake.requests == []


def test_usage_defaults_and_cost_zero() -> None:
    response = conversation([], usage={"prompt_tokens": 5, "total_tokens": True})
    result = parse_code_interpreter(response, model=MODEL, prompt="p")
    assert result.usage == {
        "prompt_tokens": 5,
        "completion_tokens": 0,
        "total_tokens": 0,
        "connector_tokens": None,
        "connectors": None,
        "cost": 0,
    }
    no_usage = parse_code_interpreter(conversation([], usage=None), model=MODEL, prompt="p")
    assert no_usage.usage is not None
    assert no_usage.usage["cost"] == 0


def test_long_text_is_fitted_with_an_exact_count() -> None:
    entry = code_exec([{"type": "text", "text": "x" * 500}, {"type": "file_url", "file_url": "u"}])
    full = parse_code_interpreter(conversation([entry]), model=MODEL, prompt="p").text
    result = parse_code_interpreter(conversation([entry]), model=MODEL, prompt="p", max_chars=100)
    text = result.text
    assert len(text) == 100
    assert text.startswith("Mistral code interpreter")
    assert text.endswith("- file: u")  # the tail, with the file links, survives
    start, end = text.index("\n[... "), text.index(" characters omitted ...]\n")
    count = int(text[start + len("\n[... ") : end])
    marker = f"\n[... {count} characters omitted ...]\n"
    assert text[start : start + len(marker)] == marker
    assert count == len(full) - (100 - len(marker))  # exact: kept + omitted == whole
