"""Registering every Mistral tool of a session in one call (docs/mistral.md §3.1, §4.2, §4.7)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from corral.mistral._client import MistralClient
from corral.mistral._interpreter import mistral_code_interpreter_tool
from corral.mistral._loader import ConnectorLoader
from corral.mistral._search import web_search_tool
from corral.mistral._settings import MistralSettings
from corral.tools import ToolRegistry

__all__ = ["register_mistral_tools"]

logger = logging.getLogger("corral.mistral")

_UNKNOWN_HINT = "If it is a Mistral connector's tool, call mistral_connector_load first."


async def register_mistral_tools(
    registry: ToolRegistry,
    settings: MistralSettings,
    client: MistralClient,
    *,
    warn: Callable[[str], None] | None = None,
) -> ConnectorLoader | None:
    """Register ``mistral_code_interpreter`` and ``web_search``, then the connector loader.

    The two static tools are registered unconditionally (without a key they answer with
    the ``config`` error). The loader needs connector tools enabled and an API key; it then
    lists connectors, registers its three tools and applies ``autoLoad``, all before the
    caller adds listeners, so nothing is notified for the session's initial tool set.

    Returns:
        The session's loader, or None when connector tools are off or no key is set.

    Raises:
        ToolNameTaken: one of these tool names is already registered.
    """
    registry.register(mistral_code_interpreter_tool(client, settings))
    registry.register(web_search_tool(client, settings))
    if not settings.connector_tools_enabled:
        return None
    if not client.has_key:
        (warn or logger.warning)("MISTRAL_API_KEY is not set; Mistral connector tools are off.")
        return None
    loader = ConnectorLoader(
        registry,
        client,
        auto_load=settings.auto_load,
        max_output_chars=settings.max_output_chars,
        warn=warn,
    )
    await loader.start()
    registry.unknown_tool_hint = _UNKNOWN_HINT
    return loader
