from __future__ import annotations

import logging
import socket
from typing import Any

import httpx
import pytest

from corral.errors import (
    ConfigError,
    RemoteAuthError,
    RemoteStatusError,
    RemoteTimeout,
    RemoteUnavailable,
    RemoteUnreadable,
)
from corral.mistral import MistralClient, conversation_body, instructions_for

from .conftest import BASE_URL
from .fake_mistral import (
    API_KEY,
    SIGNED_URL,
    TOOL_CHOICE_422,
    FakeMistral,
    Reply,
    connector_item,
    conversation,
    error_body,
    execution,
)

pytestmark = pytest.mark.anyio


def test_instructions_are_byte_exact() -> None:
    assert instructions_for("code_interpreter") == (
        "Always use the code_interpreter tool to run Python code before answering. "
        "Never answer from memory."
    )
    assert instructions_for("web_search") == (
        "Always use the web_search tool to search the web before answering. "
        "Never answer from memory."
    )
    assert instructions_for("web_search_premium") == (
        "Always use the web_search_premium tool to search the web before answering. "
        "Never answer from memory."
    )


def test_conversation_body_never_forces_or_streams() -> None:
    body = conversation_body("web_search", "q", "mistral-small-latest")
    assert body == {
        "model": "mistral-small-latest",
        "inputs": [{"role": "user", "content": "q"}],
        "tools": [{"type": "web_search"}],
        "instructions": instructions_for("web_search"),
        "stream": False,
        "store": False,
    }


async def test_headers_on_every_request(fake: FakeMistral, client: MistralClient) -> None:
    fake.conversations.append(Reply(200, conversation([])))
    fake.connectors = [connector_item("id1", "outlook")]
    await client.create_conversation("code_interpreter", "p", "m")
    await client.list_connectors()
    post, get = fake.requests
    assert post.headers["authorization"] == f"Bearer {API_KEY}"
    assert post.headers["accept"] == "application/json"
    assert post.headers["content-type"] == "application/json"
    assert get.headers["accept"] == "application/json"
    assert "content-type" not in get.headers  # no body, no content type


async def test_no_key_sends_nothing(fake: FakeMistral) -> None:
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        client = MistralClient(None, BASE_URL, http=http)
        assert not client.has_key
        with pytest.raises(ConfigError, match="MISTRAL_API_KEY is not set"):
            await client.create_conversation("web_search", "q", "m")
    assert fake.requests == []


@pytest.mark.parametrize(
    ("reply", "cls", "status", "code", "message"),
    [
        (
            Reply(401, error_body("Unauthorized", type="authentication_error")),
            RemoteAuthError,
            401,
            None,
            "Unauthorized",
        ),
        (Reply(403, {"detail": "Forbidden"}), RemoteAuthError, 403, None, "Forbidden"),
        (
            Reply(429, error_body("Requests rate limit exceeded", code="1300")),
            RemoteStatusError,
            429,
            "1300",
            "Requests rate limit exceeded",
        ),
        (
            Reply(500, text="Internal   Server\nError " + "x" * 300, content_type="text/plain"),
            RemoteStatusError,
            500,
            None,
            "Internal Server Error " + "x" * 178,
        ),
        (
            Reply(400, error_body("Model does not support built-in connectors", code=3004)),
            RemoteStatusError,
            400,
            "3004",
            "Model does not support built-in connectors",
        ),
        (
            Reply(422, TOOL_CHOICE_422),
            RemoteStatusError,
            422,
            None,
            "body.completion_args.tool_choice: Input should be 'auto', 'none' or 'required'",
        ),
        (
            Reply(422, {"detail": [{"loc": ["body", "x"], "msg": "bad"}, {"msg": "worse"}, 7]}),
            RemoteStatusError,
            422,
            None,
            "body.x: bad; worse; 7",
        ),
        (Reply(400, error_body("m" * 900)), RemoteStatusError, 400, None, "m" * 500),
        (Reply(502, [1, 2]), RemoteStatusError, 502, None, "[1, 2]"),
        (Reply(503, error_body(None)), RemoteStatusError, 503, None, "Service Unavailable"),
    ],
)
async def test_error_bodies_become_typed_errors(
    fake: FakeMistral,
    client: MistralClient,
    reply: Reply,
    cls: type[RemoteStatusError],
    status: int,
    code: str | None,
    message: str,
) -> None:
    fake.conversations.append(reply)
    with pytest.raises(cls) as caught:
        await client.create_conversation("web_search", "q", "m")
    assert type(caught.value) is cls
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        status,
        code,
        message,
    )


async def test_a_200_that_is_not_json_is_unreadable(
    fake: FakeMistral, client: MistralClient
) -> None:
    fake.conversations.append(Reply(200, text="<html>", content_type="text/html"))
    with pytest.raises(RemoteUnreadable):
        await client.create_conversation("web_search", "q", "m")


async def test_a_refused_connection_is_remote_unavailable() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, then closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with MistralClient(API_KEY, f"http://127.0.0.1:{port}") as client:
        with pytest.raises(RemoteUnavailable) as caught:
            await client.list_connectors()
    assert not isinstance(caught.value, RemoteTimeout)


async def test_a_timeout_is_remote_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = MistralClient(API_KEY, BASE_URL, http=http)
        with pytest.raises(RemoteTimeout, match="read timed out"):
            await client.create_conversation("web_search", "q", "m")


async def test_connector_list_follows_the_cursor(fake: FakeMistral, client: MistralClient) -> None:
    fake.connectors = [connector_item(f"id{i}", f"c{i}") for i in range(3)]
    fake.page_size = 2
    items = await client.list_connectors()
    assert [i["name"] for i in items] == ["c0", "c1", "c2"]
    first, second = fake.requests
    assert first.query == {"fetch_user_data": ["true"], "page_size": ["100"]}
    assert second.query == {"fetch_user_data": ["true"], "page_size": ["100"], "cursor": ["c2"]}


async def test_a_repeating_cursor_stops_with_an_error(
    fake: FakeMistral, client: MistralClient
) -> None:
    page = {"items": [], "pagination": {"next_cursor": "same"}}
    fake.list_failures = [Reply(200, page), Reply(200, page)]
    with pytest.raises(RemoteUnreadable, match="repeated"):
        await client.list_connectors()


async def test_an_endless_cursor_stops_after_50_pages(
    fake: FakeMistral, client: MistralClient
) -> None:
    fake.list_failures = [
        Reply(200, {"items": [], "pagination": {"next_cursor": f"k{i}"}}) for i in range(50)
    ]
    with pytest.raises(RemoteUnreadable, match="50 pages"):
        await client.list_connectors()
    assert len(fake.requests) == 50


@pytest.mark.parametrize("body", [{"tools": [{"name": "a"}]}, {"items": [{"name": "a"}]}])
async def test_list_tools_accepts_a_wrapper(
    fake: FakeMistral, client: MistralClient, body: dict[str, Any]
) -> None:
    fake.tools["id1"] = Reply(200, body)
    assert await client.list_tools("id1") == [{"name": "a"}]
    fake.tools["id1"] = Reply(200, {"other": 1})
    with pytest.raises(RemoteUnreadable):
        await client.list_tools("id1")


async def test_call_tool_encodes_the_path(fake: FakeMistral, client: MistralClient) -> None:
    fake.calls[("id/1", "do it")] = Reply(200, {"content": []})
    assert await client.call_tool("id/1", "do it", {"a": 1}) == {"content": []}
    assert fake.requests[0].path == "/v1/connectors/id%2F1/tools/do%20it/call"
    assert fake.requests[0].json == {"arguments": {"a": 1}}
    fake.calls[("id/1", "do it")] = Reply(200, [1])
    with pytest.raises(RemoteUnreadable):
        await client.call_tool("id/1", "do it", {})


async def test_logs_name_the_request_never_the_body(
    fake: FakeMistral, client: MistralClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    info = {"result": [{"type": "file_url", "file_url": SIGNED_URL}]}
    fake.conversations.append(
        Reply(200, conversation([execution("code_interpreter", info), {"type": "x"}, 3]))
    )
    await client.create_conversation("code_interpreter", "secret prompt", "m")
    assert "POST /v1/conversations -> 200" in caplog.text
    assert "'tool.execution': 1" in caplog.text
    assert "SECRET" not in caplog.text
    assert "secret prompt" not in caplog.text
    assert API_KEY not in caplog.text


async def test_an_owned_http_client_is_closed() -> None:
    client = MistralClient(API_KEY)
    await client.aclose()
    assert client._http.is_closed


async def test_an_injected_http_client_is_left_open(fake: FakeMistral) -> None:
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        async with MistralClient(API_KEY, BASE_URL, http=http):
            pass
        assert not http.is_closed


async def test_a_page_without_items_is_unreadable(fake: FakeMistral, client: MistralClient) -> None:
    fake.list_failures = [Reply(200, {"data": []})]
    with pytest.raises(RemoteUnreadable, match="no items"):
        await client.list_connectors()


async def test_an_object_message_without_detail_is_dumped(
    fake: FakeMistral, client: MistralClient
) -> None:
    fake.conversations.append(Reply(400, error_body({"reason": "x"})))
    with pytest.raises(RemoteStatusError) as caught:
        await client.create_conversation("web_search", "q", "m")
    assert caught.value.message == '{"reason": "x"}'
