"""The tool registry: one name space per session, exposure, the active set and listeners."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from corral.errors import CorralError, ToolNameTaken, UnknownTool
from corral.tools._result import ToolResult
from corral.tools._tool import Exposure, Tool, ToolContext

__all__ = ["ToolRegistry"]

logger = logging.getLogger("corral.tools")

_NAME_ECHO_CHARS = 80  # the model chose the name; bound what of it we echo back

Listener = Callable[[], None]


@dataclass(slots=True)
class _Entry:
    tool: Tool
    exposure: Exposure


class ToolRegistry:
    """Every tool of one session, by unique name.

    Exposure ``active`` puts a tool in the active set on registration; ``deferred`` registers
    it inactive until :meth:`set_active` names it; ``hidden`` withdraws it: unreachable,
    never activated, but its name stays taken. Names are never freed, so a withdrawn tool's
    name cannot be handed to a different tool by accident.

    Declared tools (what a model sees) are the active ones, in registration order, so
    provider prompts stay stable as the set changes. Listeners run after every change to
    the declared tools, e.g. to send MCP ``notifications/tools/list_changed``.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._active: set[str] = set()
        self._listeners: list[Listener] = []
        self.unknown_tool_hint: str | None = None
        """Appended to the ``Unknown tool`` error, e.g. how to load more tools."""

    def register(self, tool: Tool, exposure: Exposure = "active", *, replace: bool = False) -> None:
        """Register ``tool``, or re-register a name with a new exposure.

        Re-registering the same ``Tool`` object only changes its exposure: ``hidden`` is the
        withdraw path. A *different* tool under a taken name needs ``replace=True``, so no
        registration silently replaces another. The exposure applies as on a first
        registration: ``active`` activates, ``deferred`` and ``hidden`` deactivate.

        Raises:
            ToolNameTaken: the name is held by a different tool and ``replace`` is false.
        """
        entry = self._entries.get(tool.name)
        if entry is not None and entry.tool is not tool and not replace:
            raise ToolNameTaken(f"a tool named {tool.name!r} is already registered")
        before = self._declared_key()
        if entry is None:
            self._entries[tool.name] = _Entry(tool, exposure)
        else:
            entry.tool, entry.exposure = tool, exposure
        if exposure == "active":
            self._active.add(tool.name)
        else:
            self._active.discard(tool.name)
        self._notify_if_changed(before)

    def set_active(self, names: Iterable[str]) -> None:
        """Make exactly ``names`` the active set; hidden names among them are ignored.

        Raises:
            UnknownTool: a name is not registered.
        """
        wanted = set(names)
        for name in wanted:
            if name not in self._entries:
                raise UnknownTool(f"no tool named {name!r} is registered")
        before = self._declared_key()
        self._active = {n for n in wanted if self._entries[n].exposure != "hidden"}
        self._notify_if_changed(before)

    def active(self) -> list[Tool]:
        """The declared tools: active and not hidden, in registration order."""
        return [
            e.tool
            for name, e in self._entries.items()
            if name in self._active and e.exposure != "hidden"
        ]

    def active_names(self) -> list[str]:
        """The names of :meth:`active`, in the same order."""
        return [t.name for t in self.active()]

    def get(self, name: str) -> Tool:
        """The tool registered under ``name``, whatever its exposure.

        Raises:
            UnknownTool: nothing is registered under ``name``.
        """
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownTool(f"no tool named {name!r} is registered")
        return entry.tool

    def exposure(self, name: str) -> Exposure:
        """The exposure ``name`` was last registered with.

        A deferred tool stays ``deferred`` once activated; whether a tool is declared now is
        ``name in active_names()``.

        Raises:
            UnknownTool: nothing is registered under ``name``.
        """
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownTool(f"no tool named {name!r} is registered")
        return entry.exposure

    def is_taken(self, name: str) -> bool:
        """Whether any tool, hidden included, holds ``name``."""
        return name in self._entries

    def names(self) -> list[str]:
        """Every registered name, hidden included, in registration order."""
        return list(self._entries)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener()`` after each change of the declared tools; returns a remover."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    async def call(
        self, name: str, arguments: object, context: ToolContext | None = None
    ) -> ToolResult:
        """Validate ``arguments`` against the tool's schema and run its handler.

        Never raises for a per-call failure: an undeclared name, invalid arguments or a
        ``CorralError`` from the handler become ``is_error`` results. Cancellation propagates.
        """
        entry = self._entries.get(name)
        if entry is None or name not in self._active or entry.exposure == "hidden":
            shown = name[:_NAME_ECHO_CHARS]
            message = f"Unknown tool: {shown}."
            if self.unknown_tool_hint:
                message += f" {self.unknown_tool_hint}"
            return ToolResult.failure("unknown_tool", message, details={"tool": shown})
        details = {"tool": name}
        if not isinstance(arguments, Mapping):
            return ToolResult.failure(
                "invalid_input", f"{name}: arguments must be a JSON object.", details=details
            )
        problems = entry.tool.validate(arguments)
        if problems:
            text = f"Invalid arguments for {name}:\n" + "\n".join(f"- {p}" for p in problems)
            return ToolResult.failure("invalid_input", text, details=details)
        args: dict[str, Any] = dict(arguments)
        try:
            return await entry.tool.handler(args, context or ToolContext())
        except CorralError as exc:
            # Handlers should return error results themselves; this keeps one tool's
            # infrastructure failure from ending the agent's whole turn.
            logger.exception("tool %s raised", name)
            return ToolResult.failure(
                "tool_error", f"{name} failed: {type(exc).__name__}: {exc}", details=details
            )

    def _declared_key(self) -> tuple[Tool, ...]:
        # Tools compare by identity, not name: replacing an active tool's definition changes
        # what is served even though the names stay the same.
        return tuple(self.active())

    def _notify_if_changed(self, before: tuple[Tool, ...]) -> None:
        if self._declared_key() != before:
            for listener in list(self._listeners):
                listener()
