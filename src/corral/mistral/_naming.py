"""Collision-free client names for connector tools (docs/mistral.md §4.4)."""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["connector_namespace", "resolve_name", "sanitize"]

_INVALID = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # characters; OpenAI's, Anthropic's and Mistral's limit on tool names
_MAX_CONNECTOR = 40  # of a connector name inside a suffix, so the original keeps some room


def sanitize(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_``."""
    return _INVALID.sub("_", name) or "_"


def connector_namespace(connector: str) -> str:
    """The namespace of a connector's tools: ``mistral_cn_<connector>``."""
    return "mistral_cn_" + sanitize(connector)


def resolve_name(remote: str, connector: str, taken: Callable[[str], bool]) -> str:
    """The first free name of: the original, ``<original>__<connector>``, then ``_2``, ``_3``…

    A candidate longer than 64 characters loses the end of its original part and keeps its
    suffix, so two long names of different connectors still differ.
    """
    original = sanitize(remote)
    first = original[:_MAX_NAME]
    if not taken(first):
        return first
    suffix = "__" + sanitize(connector)[:_MAX_CONNECTOR]
    candidate = _fit(original, suffix)
    n = 2
    while taken(candidate):
        candidate = _fit(original, f"{suffix}_{n}")
        n += 1
    return candidate


def _fit(original: str, suffix: str) -> str:
    return original[: _MAX_NAME - len(suffix)] + suffix
