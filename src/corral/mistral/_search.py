"""``web_search``: Mistral's built-in web search over one Conversations call.

The payload and outcomes are docs/mistral.md §3.5-3.6; why it is built so, §8.1.
"""

from __future__ import annotations

import json
from typing import Any

from corral.errors import RemoteUnreadable
from corral.mistral._client import MistralClient
from corral.mistral._conversations import matching_entries, parse_usage, run_conversation
from corral.mistral._failures import fit
from corral.mistral._interpreter import MISTRAL_NAMESPACE
from corral.mistral._settings import DEFAULT_OUTPUT_CHARS, MistralSettings
from corral.tools import Tool, ToolAnnotations, ToolContext, ToolResult

__all__ = ["parse_web_search", "web_search_tool"]

_BILLING = "Searches are billed per use by Mistral, and premium search costs extra per call."
_DESCRIPTION = (
    "Search the web with Mistral's built-in web search (one stateless Mistral call) and get "
    "the hits back: title, URL, description and snippets. " + _BILLING
)
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to search the web for."},
        "premium": {
            "type": "boolean",
            "default": False,
            "description": "Use Mistral's premium search (web_search_premium) for higher "
            "quality results. " + _BILLING,
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def parse_web_search(
    response: Any,
    *,
    query: str,
    model: str,
    premium: bool = False,
    max_chars: int = DEFAULT_OUTPUT_CHARS,
) -> ToolResult:
    """Turn a Conversations response into the search result (docs/mistral.md §3.5-3.7).

    Pure. No execution entry is a skip (worth retrying), never "no results"; an executed
    search with an empty hit map is the genuinely empty result.
    """
    tool_type = "web_search_premium" if premium else "web_search"
    base = {"tool": tool_type, "model": model, "query": query}
    # The premium backend's entry name is unverified, so the plain name matches too.
    names = (tool_type, "web_search")
    try:
        maps = [_hit_map(entry) for entry in matching_entries(response, names)]
    except RemoteUnreadable:
        text = f"Mistral returned a {tool_type} result corral could not read."
        return ToolResult.failure("unreadable_result", text, details=base)
    hits: list[dict[str, Any]] = []
    seen: set[str] = set()
    for hit in (h for hit_map in maps for h in hit_map):
        if hit["url"] not in seen:
            seen.add(hit["url"])
            hits.append(hit)
    if not maps:
        text = (
            f'Web search was skipped by Mistral: no search was executed for "{query}". '
            "This is not an empty result; retrying may succeed."
        )
    elif not hits:
        text = f'Web search returned no results for "{query}".'
    else:
        text = _render(hits, query, model)
    return ToolResult.ok(
        fit(text, max_chars),
        structured={"skipped": not maps, "query": query, "hits": hits},
        details={**base, "executed": bool(maps), "skipped": not maps, "hitCount": len(hits)},
        usage=parse_usage(response),
    )


def web_search_tool(client: MistralClient, settings: MistralSettings) -> Tool:
    """The ``web_search`` tool; ``premium: true`` routes a call to ``web_search_premium``."""

    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        query = arguments.get("query")
        premium = arguments.get("premium") is True
        tool_type = "web_search_premium" if premium else "web_search"
        model = settings.search_model
        details = {"tool": tool_type, "model": model, "query": query}
        if not isinstance(query, str) or not query.strip():
            return ToolResult.failure(
                "invalid_input", "query must be a non-empty string.", details=details
            )
        return await run_conversation(
            client,
            tool_type=tool_type,
            content=query,
            model=model,
            details=details,
            parse=lambda r: parse_web_search(
                r,
                query=query,
                model=model,
                premium=premium,
                max_chars=settings.max_output_chars,
            ),
        )

    return Tool(
        name="web_search",
        description=_DESCRIPTION,
        parameters=_PARAMETERS,
        handler=handler,
        annotations=ToolAnnotations(
            title="Web search", read_only_hint=True, destructive_hint=False, open_world_hint=True
        ),
        namespace=MISTRAL_NAMESPACE,
    )


def _hit_map(entry: dict[str, Any]) -> list[dict[str, Any]]:
    info = entry.get("info")
    raw = info.get("result") if isinstance(info, dict) else None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise RemoteUnreadable("a web_search result is not JSON") from exc
    if not isinstance(raw, dict):
        raise RemoteUnreadable("a web_search result is not an object of hits")
    hits = [hit for hit in map(_map_hit, raw.values()) if hit is not None]
    if raw and not hits:
        raise RemoteUnreadable("no web_search hit could be read")
    return hits


def _map_hit(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(value.get("url"), str):
        return None
    title = value.get("title")
    hit: dict[str, Any] = {"url": value["url"], "title": title if isinstance(title, str) else ""}
    if isinstance(value.get("description"), str):
        hit["description"] = value["description"]
    snippets = value.get("snippets")
    hit["snippets"] = (
        [s for s in snippets if isinstance(s, str)] if isinstance(snippets, list) else []
    )
    return hit


def _render(hits: list[dict[str, Any]], query: str, model: str) -> str:
    noun = "result" if len(hits) == 1 else "results"
    lines = [f'Web search (model {model}): {len(hits)} {noun} for "{query}"']
    for i, hit in enumerate(hits, 1):
        lines.append(f"{i}. {hit['title'] or hit['url']}")
        lines.append(f"   {hit['url']}")
        if hit.get("description"):
            lines.append(f"   {hit['description']}")
        lines.extend(f"   {snippet}" for snippet in hit["snippets"])
    return "\n".join(lines)
