"""The connector loader: one session's connector tools, loaded on demand.

Session start, the loader tools, names and state: docs/mistral.md §4.2-4.6.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio

from corral.errors import CorralError, ToolError
from corral.mistral._client import MistralClient
from corral.mistral._connectors import (
    Connector,
    Discovery,
    RemoteTool,
    connector_tool,
    discover,
    is_unauthenticated,
    unauthenticated_text,
)
from corral.mistral._failures import failure_result, first_line
from corral.mistral._loader_tools import loader_tools
from corral.mistral._naming import connector_namespace, resolve_name
from corral.mistral._settings import DEFAULT_OUTPUT_CHARS
from corral.tools import Exposure, Namespace, Tool, ToolRegistry, ToolResult

__all__ = ["ConnectorLoader"]

logger = logging.getLogger("corral.mistral")


class ConnectorLoader:
    """Loader state for one session: connector snapshot, name mapping, loaded set, warnings.

    It starts empty with each session and is never cleared within one. Names are decided
    once per (connector, remote tool) pair and kept for the session, so loading again after
    an unload, or restoring exported state, reactivates the same names.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        client: MistralClient,
        *,
        auto_load: Iterable[str] = (),
        max_output_chars: int = DEFAULT_OUTPUT_CHARS,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self._registry = registry
        self._client = client
        self._auto_load = tuple(auto_load)
        self._max_chars = max_output_chars
        self._warn_sink = warn or logger.warning
        self._warned: set[str] = set()
        self._discovery = Discovery()
        self._names: dict[tuple[str, str], str] = {}
        self._owned: dict[str, Tool] = {}
        self._summaries: dict[str, str] = {}
        self._loaded: dict[str, list[str]] = {}
        self._load_tool: Tool | None = None
        # A model may call loader tools in parallel; one at a time keeps load idempotent.
        self._lock = anyio.Lock()

    async def start(self) -> None:
        """List connectors, register the loader tools (active) and apply ``autoLoad``.

        Raises:
            ToolNameTaken: a loader tool's name is already registered.
        """
        self._discovery = await discover(self._client)
        self._warn_unchecked()
        load, unload, reload = loader_tools(self, self._load_description())
        for tool in (load, unload, reload):
            self._registry.register(tool)
        self._load_tool = load
        for name in self._auto_load:
            if name not in self._discovery.connectors:
                self._warn(f"autoLoad: connector {name!r} is unknown or not authenticated; skipped")
                continue
            result = await self.load(name)
            if result.is_error:
                self._warn(f"autoLoad: connector {name!r} could not be loaded: {result.text}")

    def connectors(self) -> list[Connector]:
        """The authenticated connectors of the last listing."""
        return list(self._discovery.connectors.values())

    def loaded(self) -> dict[str, list[str]]:
        """Loaded connector name -> the client names of its tools."""
        return {name: list(tools) for name, tools in self._loaded.items()}

    async def load(self, connector: str) -> ToolResult:
        """Register a connector's tools deferred, then activate them (idempotent)."""
        async with self._lock:
            return await self._load(connector)

    async def _load(self, connector: str) -> ToolResult:
        found = self._find(connector)
        if found is None:
            return self._not_loadable(connector)
        details: dict[str, Any] = {"connector": found.name}
        names = self._loaded.get(found.name)
        if names is None:
            try:
                raw = await self._client.list_tools(found.id)
            except CorralError as exc:
                if is_unauthenticated(exc):
                    del self._discovery.connectors[found.name]
                    self._discovery.unauthenticated[found.name] = exc.message
                    text = unauthenticated_text(found.name, exc.message)
                    return ToolResult.failure("auth", text, details=details, status=401)
                return failure_result(
                    exc,
                    base_url=self._client.base_url,
                    model="",
                    subject="connector tools list",
                    details=details,
                )
            names = self._register_tools(found, raw)
            self._loaded[found.name] = names
        active = self._registry.active_names()
        self._registry.set_active([*active, *(n for n in names if n not in active)])
        return self._load_result(found, names)

    async def unload(self, connector: str) -> ToolResult:
        """Deactivate a connector's tools and re-register them hidden; names stay reserved."""
        async with self._lock:
            return self._unload(connector)

    def _unload(self, connector: str) -> ToolResult:
        name = self._loaded_name(connector)
        if name is None:
            return ToolResult.ok(f'"{connector}" is not loaded.', details={"connector": connector})
        names = self._loaded.pop(name)
        # Deactivate first so listeners see one change, not one per hidden re-registration.
        self._registry.set_active([n for n in self._registry.active_names() if n not in names])
        for tool_name in names:
            self._registry.register(self._owned[tool_name], "hidden")
        listing = ", ".join(names)
        return ToolResult.ok(
            f'Unloaded {_count(len(names))} from "{name}"' + (f": {listing}." if names else "."),
            details={"connector": name, "tools": names, "count": len(names)},
        )

    async def reload(self) -> ToolResult:
        """List connectors again and refresh the load description (not loaded schemas)."""
        async with self._lock:
            return await self._reload()

    async def _reload(self) -> ToolResult:
        self._discovery = await discover(self._client)
        self._warned -= {w for w in self._warned if w.startswith("connector check")}
        self._warn_unchecked()
        self._refresh_load_tool()
        if self._discovery.error is not None:
            return ToolResult.failure(
                "unavailable", f"The connector list is unavailable: {self._discovery.error}"
            )
        lines = [f"Connectors available to mistral_connector_load ({len(self.connectors())}):"]
        for c in self.connectors():
            summary = first_line(c.description) or "(no description)"
            mark = " (loaded)" if c.name in self._loaded else ""
            lines.append(f"- {c.name} — {summary}{mark}")
        return ToolResult.ok(
            "\n".join(lines),
            details={"connectors": [c.name for c in self.connectors()], "loaded": [*self._loaded]},
        )

    def export_state(self) -> dict[str, Any]:
        """``{"loaded", "names"}``: enough to resume or fork a session with stable names."""
        return {
            "loaded": list(self._loaded),
            "names": [[c, remote, name] for (c, remote), name in self._names.items()],
        }

    async def restore_state(self, state: Mapping[str, Any]) -> None:
        """Adopt exported names, then load the connectors that were loaded.

        Call it after :meth:`start`. A mapping whose name is now held by another tool is
        dropped (that pair gets a fresh name); an existing mapping is kept.

        Raises:
            ToolError: ``state`` is not what :meth:`export_state` produces.
        """
        names, loaded = state.get("names", []), state.get("loaded", [])
        if not isinstance(names, list) or not isinstance(loaded, list):
            raise ToolError("connector state must hold lists 'names' and 'loaded'")
        for item in names:
            if not (
                isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)
            ):
                raise ToolError("connector state 'names' must be [connector, remote, name] triples")
            connector, remote, name = item
            if (connector, remote) in self._names or self._reserved(name):
                continue
            self._names[(connector, remote)] = name
        for connector in loaded:
            if isinstance(connector, str):
                result = await self.load(connector)
                if result.is_error:
                    self._warn(f"restore: connector {connector!r} could not be loaded")

    def _register_tools(self, connector: Connector, raw_tools: list[Any]) -> list[str]:
        namespace = Namespace(
            name=connector_namespace(connector.name),
            aliases=(connector.name,),
            description=connector.description,
        )
        names: list[str] = []
        seen: set[str] = set()
        for raw in raw_tools:
            remote = RemoteTool.parse(raw)
            if remote is None or remote.name in seen:
                continue
            seen.add(remote.name)
            name = self._name_for(connector.name, remote.name)
            try:
                tool = connector_tool(
                    self._client,
                    connector,
                    remote,
                    name=name,
                    namespace=namespace,
                    max_chars=self._max_chars,
                )
            except ToolError as exc:
                self._warn(f"connector {connector.name}: tool {remote.name!r} skipped: {exc}")
                continue
            # Replacing is only ever done on a name this loader registered itself.
            self._registry.register(tool, "deferred", replace=name in self._owned)
            self._owned[name] = tool
            self._summaries[name] = first_line(remote.description) or "(no description)"
            names.append(name)
        return names

    def _name_for(self, connector: str, remote: str) -> str:
        name = self._names.get((connector, remote))
        if name is None or (name not in self._owned and self._registry.is_taken(name)):
            name = resolve_name(remote, connector, self._reserved)
            self._names[(connector, remote)] = name
        return name

    def _reserved(self, name: str) -> bool:
        return self._registry.is_taken(name) or name in self._names.values()

    def _find(self, connector: str) -> Connector | None:
        by_name = self._discovery.connectors.get(connector)
        if by_name is not None:
            return by_name
        return next((c for c in self.connectors() if c.id == connector), None)

    def _loaded_name(self, connector: str) -> str | None:
        if connector in self._loaded:
            return connector
        found = self._find(connector)
        return found.name if found is not None and found.name in self._loaded else None

    def _not_loadable(self, connector: str) -> ToolResult:
        details = {"connector": connector}
        if connector in self._discovery.unauthenticated:
            text = unauthenticated_text(connector, self._discovery.unauthenticated[connector])
            return ToolResult.failure("auth", text, details=details)
        loadable = ", ".join(self._discovery.connectors) or "none"
        text = f'Unknown connector "{connector}". Loadable connectors: {loadable}.'
        if self._discovery.error is not None:
            text += " The connector list is unavailable; call mistral_connector_reload."
        return ToolResult.failure("unknown_connector", text, details=details)

    def _load_result(self, connector: Connector, names: list[str]) -> ToolResult:
        namespace = connector_namespace(connector.name)
        lines = [
            f'Loaded {_count(len(names))} from connector "{connector.name}" '
            f"(namespace {namespace}):"
        ]
        lines += [f"- {n}: {self._summaries[n]}" for n in names]
        lines.append("They can be called from your next step.")
        return ToolResult.ok(
            "\n".join(lines),
            structured={"connector": connector.name, "namespace": namespace, "tools": names},
            details={"connector": connector.name, "tools": names, "count": len(names)},
        )

    def _load_description(self) -> str:
        head = (
            "Load the tools of a Mistral connector so you can call them from your next step; "
            "the result lists every tool loaded. Pass the connector's name."
        )
        if self._discovery.error is not None:
            return (
                f"{head}\nThe connector list is unavailable ({self._discovery.error}); "
                "call mistral_connector_reload to retry."
            )
        if not self._discovery.connectors:
            return (
                f"{head}\nNo authenticated connector was found. Connect one in Mistral, "
                "then call mistral_connector_reload."
            )
        lines = [f"{head}\nAuthenticated connectors:"]
        for c in self.connectors():
            lines.append(f"- {c.name} — {first_line(c.description) or '(no description)'}")
        return "\n".join(lines)

    def _refresh_load_tool(self) -> None:
        old = self._load_tool
        description = self._load_description()
        if old is None or old.description == description:
            return
        new = loader_tools(self, description)[0]
        active = old.name in self._registry.active_names()
        exposure: Exposure = "active" if active else "deferred"
        self._registry.register(new, exposure, replace=True)
        self._load_tool = new

    def _warn_unchecked(self) -> None:
        for name in self._discovery.unchecked:
            self._warn(f"connector check failed for {name!r}; excluded until reload")

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self._warn_sink(message)


def _count(n: int) -> str:
    return f"{n} tool" if n == 1 else f"{n} tools"
