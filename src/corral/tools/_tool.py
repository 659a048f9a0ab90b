"""A tool definition: name, description, JSON Schema parameters, annotations and handler."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators
import referencing.exceptions

from corral.errors import ToolError
from corral.tools._result import ToolResult

__all__ = [
    "TOOL_NAME_PATTERN",
    "Exposure",
    "Namespace",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolHandler",
]

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""The names every target accepts: OpenAI, Anthropic and Mistral share it; MCP is looser."""

Exposure = Literal["active", "deferred", "hidden"]

_MAX_ERRORS = 5  # argument errors reported per call; the model fixes the first few anyway
_MAX_ERROR_CHARS = 300  # per message; jsonschema quotes the offending value, which can be huge


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """Per-call things a handler may use; cancellation arrives through anyio, not here."""

    invocation: Any | None = None
    """An opaque object owned by the front end (e.g. an invocation with a call quota)."""
    progress: Callable[[dict[str, Any]], None] | None = None
    """Sink for metadata-only progress events; never code, output, names or paths."""


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolAnnotations:
    """MCP's behaviour hints, forwarded unchanged so permission layers can gate on them."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None

    @classmethod
    def from_dict(cls, data: object) -> ToolAnnotations:
        """Read MCP's camelCase annotations, keeping only well-typed values."""
        if not isinstance(data, Mapping):
            return cls()

        def hint(key: str) -> bool | None:
            value = data.get(key)
            return value if isinstance(value, bool) else None

        title = data.get("title")
        return cls(
            title=title if isinstance(title, str) else None,
            read_only_hint=hint("readOnlyHint"),
            destructive_hint=hint("destructiveHint"),
            idempotent_hint=hint("idempotentHint"),
            open_world_hint=hint("openWorldHint"),
        )

    def to_dict(self) -> dict[str, Any]:
        """MCP's camelCase form, leaving out unset hints."""
        pairs = {
            "title": self.title,
            "readOnlyHint": self.read_only_hint,
            "destructiveHint": self.destructive_hint,
            "idempotentHint": self.idempotent_hint,
            "openWorldHint": self.open_world_hint,
        }
        return {k: v for k, v in pairs.items() if v is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace:
    """A group of tools, the way an MCP server groups its own (e.g. one connector)."""

    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Tool:
    """One tool. Identity matters: the registry tells re-registration from replacement by it.

    Raises:
        ToolError: the name is not ``^[A-Za-z0-9_-]{1,64}$``, or ``parameters`` is not a valid
            JSON Schema of ``"type": "object"``.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object, served verbatim to every front end."""
    handler: ToolHandler
    annotations: ToolAnnotations = ToolAnnotations()
    namespace: Namespace | None = None
    _validator: jsonschema.protocols.Validator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not TOOL_NAME_PATTERN.fullmatch(self.name):
            raise ToolError(f"tool name {self.name!r} does not match {TOOL_NAME_PATTERN.pattern}")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type") != "object":
            raise ToolError(f"tool {self.name}: parameters must be a JSON Schema of type object")
        schema = dict(self.parameters)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise ToolError(f"tool {self.name}: invalid parameters schema: {exc.message}") from exc
        object.__setattr__(self, "_validator", cls(schema))

    def validate(self, arguments: Mapping[str, Any]) -> list[str]:
        """Return what is wrong with ``arguments`` as short ``path: message`` lines (empty: ok)."""
        try:
            errors = sorted(
                self._validator.iter_errors(arguments),
                key=lambda e: [str(p) for p in e.absolute_path],
            )
        except (jsonschema.exceptions.UnknownType, referencing.exceptions.Unresolvable) as exc:
            # check_schema cannot see dangling $refs or custom types; they surface only here
            return [f"(schema): the tool's parameters schema cannot be applied: {exc}"]
        lines = []
        for error in errors[:_MAX_ERRORS]:
            where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
            message = error.message
            if len(message) > _MAX_ERROR_CHARS:
                message = message[:_MAX_ERROR_CHARS] + "…"
            lines.append(f"{where}: {message}")
        if len(errors) > _MAX_ERRORS:
            lines.append(f"… and {len(errors) - _MAX_ERRORS} more")
        return lines
