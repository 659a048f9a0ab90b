"""What both Conversations-backed tools share: entry selection, usage and the call itself."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from corral.errors import CorralError, RemoteUnreadable
from corral.mistral._client import MISSING_KEY_MESSAGE, MistralClient
from corral.mistral._failures import failure_result
from corral.tools import ToolResult

__all__ = ["matching_entries", "parse_usage", "run_conversation"]

logger = logging.getLogger("corral.mistral")

_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def matching_entries(response: Any, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The ``tool.execution`` entries of ``outputs`` named one of ``names``, in order.

    ``message.output`` entries are never read, not even as a fallback: the payload of a
    built-in tool is its execution entry, and a message can only paraphrase it.

    Raises:
        RemoteUnreadable: the body is not an object with an ``outputs`` list.
    """
    outputs = response.get("outputs") if isinstance(response, dict) else None
    if not isinstance(outputs, list):
        raise RemoteUnreadable("the conversation response has no outputs list")
    selected = []
    for entry in outputs:
        if not isinstance(entry, dict) or entry.get("type") != "tool.execution":
            continue
        name = entry.get("name", entry.get("function"))
        if name in names:
            selected.append(entry)
    return selected


def parse_usage(response: Any) -> dict[str, Any]:
    """The response's usage, with missing counts as 0 and ``cost`` always 0 (docs/mistral.md §3.7).

    Pay-per-use ``connector_tokens`` cannot be priced locally, so the counts are surfaced in
    full and nothing pretends to know the price.
    """
    raw = response.get("usage") if isinstance(response, dict) else None
    raw = raw if isinstance(raw, dict) else {}
    usage: dict[str, Any] = {}
    for name in _TOKEN_FIELDS:
        value = raw.get(name)
        usage[name] = value if _is_count(value) else 0
    connector_tokens = raw.get("connector_tokens")
    usage["connector_tokens"] = connector_tokens if _is_count(connector_tokens) else None
    connectors = raw.get("connectors")
    usage["connectors"] = dict(connectors) if isinstance(connectors, dict) else None
    usage["cost"] = 0
    return usage


async def run_conversation(
    client: MistralClient,
    *,
    tool_type: str,
    content: str,
    model: str,
    details: Mapping[str, Any],
    parse: Callable[[Any], ToolResult],
) -> ToolResult:
    """Send one Conversations call and parse it, turning every failure into a result."""
    if not client.has_key:
        return ToolResult.failure("config", MISSING_KEY_MESSAGE, details=details)
    try:
        response = await client.create_conversation(tool_type, content, model)
    except CorralError as exc:
        result = failure_result(
            exc, base_url=client.base_url, model=model, subject=tool_type, details=details
        )
        kind = result.error["kind"] if result.error else "error"
        logger.warning("%s call failed: %s (%s)", tool_type, kind, type(exc).__name__)
        return result
    return parse(response)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
