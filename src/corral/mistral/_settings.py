"""Mistral settings from ``corral.toml`` and the ``MISTRAL_*`` variables.

Which settings, and which source wins: docs/mistral.md §1 and §4.7.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral._config import table_values
from corral.errors import ConfigError

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_SEARCH_MODEL", "MistralSettings"]

DEFAULT_BASE_URL = "https://api.mistral.ai"
DEFAULT_SEARCH_MODEL = "mistral-small-latest"
DEFAULT_OUTPUT_CHARS = 64_000  # characters; docs/design.md §4's maxOutputCharacters

_OFF = frozenset({"0", "false", "off"})


@dataclass(frozen=True, kw_only=True, slots=True)
class MistralSettings:
    """Everything ``corral.mistral`` reads from configuration, resolved once."""

    api_key: str | None = field(default=None, repr=False)
    """``MISTRAL_API_KEY``; never logged, never in results."""
    base_url: str = DEFAULT_BASE_URL
    """``MISTRAL_BASE_URL`` without a trailing ``/`` or ``/v1``."""
    search_model: str = DEFAULT_SEARCH_MODEL
    """``[mistral.knowledge] searchModel``: the model of every Conversations call."""
    connector_tools_enabled: bool = True
    """``[mistral.connectorTools] enabled``, else ``MISTRAL_CONNECTOR_TOOLS``, else true."""
    auto_load: tuple[str, ...] = ()
    """``[mistral.connectorTools] autoLoad``: connectors loaded silently at session start."""
    max_output_chars: int = DEFAULT_OUTPUT_CHARS
    """Longest model-facing text a Mistral tool returns; the rest is cut and counted."""

    @classmethod
    def load(cls, toml: Mapping[str, Any], env: Mapping[str, str]) -> MistralSettings:
        """Resolve the settings from a parsed ``corral.toml`` and an environment mapping.

        Args:
            toml: the whole parsed file; only its ``[mistral]`` table is read.
            env: the process environment (or a test's stand-in).

        Raises:
            ConfigError: an unknown key under ``[mistral]`` or a value of the wrong type.
        """
        # The table of fields checks names (snake_case, camelCase as aliases: docs/mistral.md §1).
        knowledge = table_values(toml, "mistral.knowledge")
        connectors = table_values(toml, "mistral.connector_tools")
        if "mistral" in toml and not isinstance(toml["mistral"], Mapping):
            raise ConfigError("[mistral] must be a table")
        table_values(toml, "mistral")  # unknown keys directly under [mistral]

        search_model = knowledge.get("search_model", DEFAULT_SEARCH_MODEL)
        if not isinstance(search_model, str) or not search_model.strip():
            raise ConfigError("mistral.knowledge.search_model must be a non-empty string")

        enabled = connectors.get("enabled")
        if enabled is None:
            # The file wins over the environment (docs/mistral.md §4.7): env is only the fallback.
            raw = env.get("MISTRAL_CONNECTOR_TOOLS", "").strip().lower()
            enabled = raw not in _OFF if raw else True
        elif not isinstance(enabled, bool):
            raise ConfigError("mistral.connector_tools.enabled must be true or false")

        auto_load = connectors.get("auto_load", [])
        if not isinstance(auto_load, list) or not all(isinstance(n, str) for n in auto_load):
            raise ConfigError("mistral.connector_tools.auto_load must be a list of strings")

        return cls(
            api_key=env.get("MISTRAL_API_KEY", "").strip() or None,
            base_url=normalize_base_url(env.get("MISTRAL_BASE_URL", "")),
            search_model=search_model.strip(),
            connector_tools_enabled=enabled,
            auto_load=tuple(dict.fromkeys(n.strip() for n in auto_load if n.strip())),
        )


def normalize_base_url(url: str) -> str:
    """Strip a trailing ``/`` and ``/v1``; empty means the public API."""
    url = url.strip().rstrip("/")
    url = url.removesuffix("/v1").rstrip("/")
    return url or DEFAULT_BASE_URL
