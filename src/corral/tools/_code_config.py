"""The bounds of the code tools, and the ``[code_interpreter]`` table of ``corral.toml``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corral._config import table_values
from corral._limits import Limits
from corral.errors import ConfigError
from corral.tools._invocation import DEFAULT_MAX_CALLS

__all__ = ["DEFAULT_CODE_INTERPRETER_CONFIG", "CodeInterpreterConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeInterpreterConfig:
    """The reviewed configuration of the tool (docs/code-interpreter.md §1, docs/design.md §4)."""

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
        """Read the ``[code_interpreter]`` table of a parsed ``corral.toml``: snake_case keys
        (``max_calls``, ``timeout_ms``, ...), the older camelCase (``maxCalls``) as aliases.

        Raises:
            ConfigError: an unknown key or a value that is not a positive integer.
        """
        return cls(**table_values(raw, "code_interpreter"))


DEFAULT_CODE_INTERPRETER_CONFIG = CodeInterpreterConfig()
