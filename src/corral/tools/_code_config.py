"""The bounds of the code tools, and the ``[code_interpreter]`` table of ``corral.toml``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corral._limits import Limits
from corral.errors import ConfigError
from corral.tools._invocation import DEFAULT_MAX_CALLS

__all__ = ["DEFAULT_CODE_INTERPRETER_CONFIG", "CodeInterpreterConfig"]

# corral.toml keys of [code_interpreter]: the seed's own names (seed 002 §12.1).
_TOML_KEYS = {
    "maxCalls": "max_calls",
    "timeoutMs": "timeout_ms",
    "maxCodeCharacters": "max_code_chars",
    "maxOutputCharacters": "max_output_chars",
    "maxSources": "max_sources",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeInterpreterConfig:
    """The reviewed configuration of the tool (seed 002 §12.1, design.md §5)."""

    max_calls: int = DEFAULT_MAX_CALLS
    """Calls per invocation; front ends pass it to :class:`Invocation`."""
    timeout_ms: int = 30_000
    """Whole-call deadline: queue, worker start and run together."""
    max_code_chars: int = 20_000
    max_output_chars: int = 64_000
    """Per channel (stdout, stderr, result); the engine's byte bound applies on top."""
    max_sources: int = 4
    """Unique source ids one call may mount."""

    def __post_init__(self) -> None:
        for name in (
            "max_calls",
            "timeout_ms",
            "max_code_chars",
            "max_output_chars",
            "max_sources",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"code_interpreter {name} must be a positive integer")

    def limits(self, base: Limits) -> Limits:
        """``base`` (the engine's default) with this tool's bounds applied."""
        return base.replace(
            timeout=self.timeout_ms / 1000.0,
            code_chars=self.max_code_chars,
            output_chars=self.max_output_chars,
            max_sources=self.max_sources,
        )

    @classmethod
    def from_toml(cls, raw: Mapping[str, Any]) -> CodeInterpreterConfig:
        """Read the ``[code_interpreter]`` table of a parsed ``corral.toml``.

        Raises:
            ConfigError: an unknown key or a value that is not a positive integer.
        """
        table = raw.get("code_interpreter", {})
        if not isinstance(table, Mapping):
            raise ConfigError("[code_interpreter] must be a table")
        unknown = sorted(set(table) - set(_TOML_KEYS))
        if unknown:
            raise ConfigError(f"unknown key(s) in [code_interpreter]: {', '.join(unknown)}")
        return cls(**{_TOML_KEYS[k]: v for k, v in table.items()})


DEFAULT_CODE_INTERPRETER_CONFIG = CodeInterpreterConfig()
