"""Connector discovery and connector tool calls (docs/mistral.md §4.1, §4.2, §4.5)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import anyio

from corral.errors import CorralError, RemoteAuthError
from corral.mistral._client import MistralClient
from corral.mistral._failures import describe_failure, failure_result, fit
from corral.tools import Namespace, Tool, ToolAnnotations, ToolContext, ToolResult

__all__ = [
    "Connector",
    "Discovery",
    "RemoteTool",
    "connector_tool",
    "discover",
    "fold_call_result",
    "is_unauthenticated",
    "unauthenticated_text",
]

logger = logging.getLogger("corral.mistral")

_PROBES = 8  # concurrent list_tools probes for connectors whose auth state is unknown
_DEFAULT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class Connector:
    """One connector as listed by Mistral."""

    id: str
    name: str
    description: str = ""


@dataclass(slots=True)
class Discovery:
    """The connector snapshot of one session, as of the last listing."""

    connectors: dict[str, Connector] = field(default_factory=dict)
    """Authenticated connectors by name, in listing order."""
    unauthenticated: dict[str, str | None] = field(default_factory=dict)
    """Name -> Mistral's 401 message, or None when the listing said so."""
    unchecked: dict[str, str] = field(default_factory=dict)
    """Name -> why its probe failed; excluded until the next reload."""
    error: str | None = None
    """Why the listing itself failed, or None."""


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A connector tool as Mistral serves it in raw mode."""

    name: str
    description: str
    schema: Mapping[str, Any]
    annotations: ToolAnnotations

    @classmethod
    def parse(cls, raw: object) -> RemoteTool | None:
        """Read one tools-list item; None when it has no usable name."""
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            return None
        schema = raw.get("inputSchema", raw.get("jsonschema"))
        if not isinstance(schema, dict):
            schema = _DEFAULT_SCHEMA
        elif "type" not in schema:
            # Every provider demands an object schema; a missing type is the only repair
            # made, everything else is served verbatim.
            schema = {"type": "object", **schema}
        annotations = ToolAnnotations.from_dict(raw.get("annotations"))
        if annotations.title is None and isinstance(raw.get("title"), str):
            annotations = ToolAnnotations(
                title=raw["title"],
                read_only_hint=annotations.read_only_hint,
                destructive_hint=annotations.destructive_hint,
                idempotent_hint=annotations.idempotent_hint,
                open_world_hint=annotations.open_world_hint,
            )
        description = raw.get("description")
        return cls(
            name=raw["name"],
            description=description if isinstance(description, str) else "",
            schema=schema,
            annotations=annotations,
        )


def is_unauthenticated(exc: CorralError) -> TypeGuard[RemoteAuthError]:
    """The per-connector signal: 401 on a connector endpoint, whatever the message says."""
    return isinstance(exc, RemoteAuthError) and exc.status == 401


def unauthenticated_text(connector: str, message: str | None) -> str:
    """What the model reads when a connector has no credentials at Mistral."""
    why = f" (HTTP 401: {message})" if message else ""
    return (
        f'Connector "{connector}" is not authenticated{why}. '
        "Connect it in Mistral, then call mistral_connector_reload."
    )


async def discover(client: MistralClient) -> Discovery:
    """List every connector and sort them into authenticated or excluded (docs/mistral.md §4.2)."""
    found = Discovery()
    try:
        items = await client.list_connectors()
    except CorralError as exc:
        _, found.error = describe_failure(
            exc, base_url=client.base_url, model="", subject="connector list"
        )
        logger.warning("connector listing failed: %s", type(exc).__name__)
        return found
    unknown: list[Connector] = []
    for item in items:
        if not isinstance(item, dict) or item.get("supports_mcp") is False:
            continue
        cid, name = item.get("id"), item.get("name")
        if not isinstance(cid, str) or not isinstance(name, str) or not cid or not name:
            continue
        if name in found.connectors or name in found.unauthenticated:
            continue  # names are how the model picks a connector: the first one listed wins
        description = item.get("description")
        connector = Connector(cid, name, description if isinstance(description, str) else "")
        auth = item.get("is_authenticated")
        if auth is False:
            found.unauthenticated[name] = None
            continue
        found.connectors[name] = connector  # listing order; unknown ones may leave below
        if auth is not True:
            unknown.append(connector)
    limiter = anyio.CapacityLimiter(_PROBES)

    async def probe(connector: Connector) -> None:
        async with limiter:
            try:
                await client.list_tools(connector.id)  # the tools are not kept
            except CorralError as exc:
                del found.connectors[connector.name]
                if is_unauthenticated(exc):
                    found.unauthenticated[connector.name] = exc.message
                else:
                    found.unchecked[connector.name] = f"{type(exc).__name__}: {exc}"

    async with anyio.create_task_group() as tg:
        for connector in unknown:
            tg.start_soon(probe, connector)
    return found


def fold_call_result(data: Mapping[str, Any]) -> tuple[str, bool, dict[str, Any] | None] | None:
    """``(text, is_error, structured)`` of a tool-call response; None when unreadable.

    Text blocks are joined with newlines and every other block becomes a placeholder line,
    so the model learns something was there without corral forwarding what it cannot vet.
    """
    content = data.get("content")
    if not isinstance(content, list):
        return None
    lines = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            lines.append(str(block.get("text", "")))
        else:
            kind = block.get("type") if isinstance(block, dict) else None
            lines.append(f"[{kind if isinstance(kind, str) else 'unknown'} content omitted]")
    metadata = data.get("metadata")
    mcp_meta = metadata.get("mcp_meta") if isinstance(metadata, dict) else None
    mcp_meta = mcp_meta if isinstance(mcp_meta, dict) else {}
    structured = data.get("structuredContent", mcp_meta.get("structuredContent"))
    return (
        "\n".join(lines),
        mcp_meta.get("isError") is True,
        structured if isinstance(structured, dict) else None,
    )


def connector_tool(
    client: MistralClient,
    connector: Connector,
    remote: RemoteTool,
    *,
    name: str,
    namespace: Namespace,
    max_chars: int,
) -> Tool:
    """A registry tool that calls ``remote`` under the client ``name``.

    Raises:
        ToolError: the connector's schema is not a valid object schema.
    """

    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        details = {
            "tool": name,
            "connector": connector.name,
            "remoteTool": remote.name,
            "isError": True,
        }
        try:
            data = await client.call_tool(connector.id, remote.name, arguments)
        except CorralError as exc:
            if is_unauthenticated(exc):
                text = unauthenticated_text(connector.name, exc.message)
                return ToolResult.failure("auth", text, details=details, status=401)
            return failure_result(
                exc, base_url=client.base_url, model="", subject="connector", details=details
            )
        folded = fold_call_result(data)
        if folded is None:
            text = "Mistral returned a connector result corral could not read."
            return ToolResult.failure("unreadable_result", text, details=details)
        text, is_error, structured = folded
        text = fit(text, max_chars)
        details["isError"] = is_error
        if is_error:
            return ToolResult.failure(
                "tool_error", text or f"{name} failed.", details=details, structured=structured
            )
        return ToolResult.ok(text, structured=structured, details=details)

    fallback = f"Tool {remote.name} of the Mistral connector {connector.name}."
    return Tool(
        name=name,
        description=remote.description or fallback,
        parameters=remote.schema,
        handler=handler,
        annotations=remote.annotations,
        namespace=namespace,
    )
