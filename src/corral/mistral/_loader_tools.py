"""The three loader tools the model calls: load, unload and reload (docs/mistral.md §4.3)."""

from __future__ import annotations

from typing import Any, Protocol

from corral.tools import Namespace, Tool, ToolAnnotations, ToolContext, ToolResult

__all__ = ["LOADER_NAMESPACE", "LOADER_TOOL_NAMES", "LoaderActions", "loader_tools"]

LOADER_NAMESPACE = Namespace(
    name="mistral_connectors",
    description="Load and unload the client-side tools of Mistral connectors.",
)
LOADER_TOOL_NAMES = (
    "mistral_connector_load",
    "mistral_connector_unload",
    "mistral_connector_reload",
)

_CONNECTOR_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "connector": {
            "type": "string",
            "description": "The connector's name (its id also works).",
        }
    },
    "required": ["connector"],
    "additionalProperties": False,
}
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class LoaderActions(Protocol):
    """What the three tools do: the connector loader's actions."""

    async def load(self, connector: str) -> ToolResult: ...

    async def unload(self, connector: str) -> ToolResult: ...

    async def reload(self) -> ToolResult: ...


def loader_tools(loader: LoaderActions, load_description: str) -> tuple[Tool, Tool, Tool]:
    """The loader tools bound to ``loader``; load's description lists the connectors."""

    async def load(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await loader.load(str(arguments["connector"]))

    async def unload(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await loader.unload(str(arguments["connector"]))

    async def reload(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await loader.reload()

    # These change only which tools the session declares, never anything outside it.
    hints = {"destructive_hint": False, "open_world_hint": False}
    return (
        Tool(
            name="mistral_connector_load",
            description=load_description,
            parameters=_CONNECTOR_PARAMETERS,
            handler=load,
            annotations=ToolAnnotations(
                title="Load connector tools", idempotent_hint=True, **hints
            ),
            namespace=LOADER_NAMESPACE,
        ),
        Tool(
            name="mistral_connector_unload",
            description=(
                "Withdraw a loaded Mistral connector's tools: they are no longer declared "
                "or callable. Load the connector again to get them back under the same names."
            ),
            parameters=_CONNECTOR_PARAMETERS,
            handler=unload,
            annotations=ToolAnnotations(
                title="Unload connector tools", idempotent_hint=True, **hints
            ),
            namespace=LOADER_NAMESPACE,
        ),
        Tool(
            name="mistral_connector_reload",
            description=(
                "List the Mistral connectors again (e.g. after connecting one in Mistral) and "
                "refresh which ones mistral_connector_load can load. Tools already loaded are "
                "not refreshed; unload and load a connector for that."
            ),
            parameters=_NO_PARAMETERS,
            handler=reload,
            annotations=ToolAnnotations(
                title="Reload connector list", read_only_hint=True, **hints
            ),
            namespace=LOADER_NAMESPACE,
        ),
    )
