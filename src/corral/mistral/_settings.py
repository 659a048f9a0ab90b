"""Mistral settings from ``corral.toml`` and the ``MISTRAL_*`` variables (spec §1, §4.7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.errors import ConfigError

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_SEARCH_MODEL", "MistralSettings"]

DEFAULT_BASE_URL = "https://api.mistral.ai"
DEFAULT_SEARCH_MODEL = "mistral-small-latest"
DEFAULT_OUTPUT_CHARS = 64_000  # characters; design §5's maxOutputCharacters

_SECTIONS: dict[str, frozenset[str]] = {
    "knowledge": frozenset({"searchModel"}),
    "connectorTools": frozenset({"enabled", "autoLoad"}),
}
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
        table = _table(toml.get("mistral", {}), "mistral")
        unknown = set(table) - set(_SECTIONS)
        if unknown:
            raise ConfigError(f"unknown key(s) in [mistral]: {', '.join(sorted(unknown))}")
        knowledge = _section(table, "knowledge")
        connectors = _section(table, "connectorTools")

        search_model = knowledge.get("searchModel", DEFAULT_SEARCH_MODEL)
        if not isinstance(search_model, str) or not search_model.strip():
            raise ConfigError("mistral.knowledge.searchModel must be a non-empty string")

        enabled = connectors.get("enabled")
        if enabled is None:
            # The file wins over the environment (spec §4.7), so env is only the fallback.
            raw = env.get("MISTRAL_CONNECTOR_TOOLS", "").strip().lower()
            enabled = raw not in _OFF if raw else True
        elif not isinstance(enabled, bool):
            raise ConfigError("mistral.connectorTools.enabled must be true or false")

        auto_load = connectors.get("autoLoad", [])
        if not isinstance(auto_load, list) or not all(isinstance(n, str) for n in auto_load):
            raise ConfigError("mistral.connectorTools.autoLoad must be a list of strings")

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


def _table(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"[{where}] must be a table")
    return value


def _section(table: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = _table(table.get(name, {}), f"mistral.{name}")
    unknown = set(section) - _SECTIONS[name]
    if unknown:
        raise ConfigError(f"unknown key(s) in [mistral.{name}]: {', '.join(sorted(unknown))}")
    return section
