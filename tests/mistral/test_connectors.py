"""Connector discovery (K1, K2) and connector tool calls (K4)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.mistral import Connector, MistralClient
from corral.mistral._connectors import RemoteTool, discover, fold_call_result
from corral.tools import ToolAnnotations

from .fake_mistral import FakeMistral, Reply, call_reply, remote_tool
from .world import UNAUTHENTICATED, populate

pytestmark = pytest.mark.anyio


async def test_k1_discovery_reads_every_page_and_classifies(
    fake: FakeMistral, client: MistralClient
) -> None:
    populate(fake)
    found = await discover(client)
    lists = [r for r in fake.requests if r.path == "/v1/connectors"]
    assert len(lists) == 3
    assert all(r.query["fetch_user_data"] == ["true"] for r in lists)
    assert list(found.connectors) == ["outlook", "notion"]
    assert found.connectors["outlook"] == Connector(
        "o1", "outlook", "Read, search and send Outlook mail."
    )
    assert found.unauthenticated == {"calendar": "No credentials found", "drive": None}
    assert list(found.unchecked) == ["broken"]
    assert found.error is None
    probed = {r.path for r in fake.requests if r.path.endswith("/tools")}
    assert probed == {
        "/v1/connectors/n1/tools",
        "/v1/connectors/c1/tools",
        "/v1/connectors/b1/tools",
    }


async def test_k2_401_as_a_detail_body_is_the_same_signal(
    fake: FakeMistral, client: MistralClient
) -> None:
    populate(fake)
    fake.tools["n1"] = Reply(401, {"detail": "No credentials found"})
    found = await discover(client)
    assert found.unauthenticated["notion"] == "No credentials found"
    assert "notion" not in found.connectors


async def test_a_failed_listing_is_recorded_not_raised(
    fake: FakeMistral, client: MistralClient
) -> None:
    fake.list_failures = [Reply(500, text="down", content_type="text/plain")]
    found = await discover(client)
    assert found.connectors == {}
    assert found.error == "Mistral rejected the request (HTTP 500): down"


async def test_malformed_items_and_duplicate_names_are_skipped(
    fake: FakeMistral, client: MistralClient
) -> None:
    fake.connectors = [
        {"id": 1, "name": "bad"},
        {"name": "noid"},
        {"id": "a", "name": "dup", "is_authenticated": True, "description": 3},
        {"id": "b", "name": "dup", "is_authenticated": None},
        "junk",  # type: ignore[list-item]
    ]
    found = await discover(client)
    assert found.connectors == {"dup": Connector("a", "dup", "")}


def test_remote_tool_parsing() -> None:
    tool = RemoteTool.parse(
        remote_tool("t", "d", title="T", annotations={"readOnlyHint": True, "x": 1})
    )
    assert tool is not None
    assert tool.annotations == ToolAnnotations(title="T", read_only_hint=True)
    assert tool.schema["properties"]["folder"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    legacy = RemoteTool.parse({"name": "l", "jsonschema": {"properties": {"a": {}}}})
    assert legacy is not None
    assert legacy.schema == {"type": "object", "properties": {"a": {}}}
    bare = RemoteTool.parse({"name": "b", "description": None})
    assert bare is not None
    assert bare.schema == {"type": "object", "properties": {}}
    assert bare.description == ""
    assert RemoteTool.parse({"name": ""}) is None
    assert RemoteTool.parse([1]) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "metadata": {"mcp_meta": {"isError": False}},
            },
            ("a\nb", False, None),
        ),
        (
            {
                "content": [{"type": "text", "text": "denied"}],
                "metadata": {"mcp_meta": {"isError": True, "structuredContent": {"k": 1}}},
            },
            ("denied", True, {"k": 1}),
        ),
        (
            {"content": [{"type": "image", "data": "x"}, "junk", {"type": "text", "text": "t"}]},
            ("[image content omitted]\n[unknown content omitted]\nt", False, None),
        ),
        ({"content": [], "structuredContent": {"s": 1}}, ("", False, {"s": 1})),
        ({"content": "nope"}, None),
    ],
)
def test_k4_folding(body: dict[str, Any], expected: Any) -> None:
    assert fold_call_result(body) == expected


def test_unauthenticated_body_shape() -> None:
    assert UNAUTHENTICATED["message"] == "No credentials found"
    assert call_reply([]).json == {
        "content": [],
        "metadata": {"mcp_meta": {"isError": False, "structuredContent": None}},
    }
