"""Exceptions from the Mistral client, turned into sentences a model can act on.

The table of kinds and texts is docs/mistral.md §3.8.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.errors import (
    ConfigError,
    CorralError,
    RemoteAuthError,
    RemoteStatusError,
    RemoteUnavailable,
    RemoteUnreadable,
)
from corral.mistral._settings import DEFAULT_SEARCH_MODEL
from corral.tools import ToolResult

__all__ = ["describe_failure", "failure_result", "first_line", "fit"]

_STATUS_KINDS = {404: "not_found", 422: "invalid_request", 429: "rate_limited"}


def describe_failure(
    exc: CorralError, *, base_url: str, model: str, subject: str
) -> tuple[str, str]:
    """``(kind, model-facing text)`` for one failure; never a raw body.

    Args:
        exc: what the client raised.
        base_url: where the client was pointed, for transport failures.
        model: the model of the request, named by the 3004 text.
        subject: what was asked for: a built-in tool type, or a server-tool type for 1800.
    """
    if isinstance(exc, RemoteStatusError):
        if exc.code == "3004":
            return "model_unsupported", (
                f"The search model '{model}' cannot run Mistral's built-in tools "
                f"(HTTP {exc.status}, code 3004). Set mistral.knowledge.searchModel in "
                f"corral.toml to a model that supports them; the default is "
                f"{DEFAULT_SEARCH_MODEL}."
            )
        if exc.code == "1800":
            return "tool_unsupported", (
                f"Mistral chat completions rejects the server tool '{subject}' "
                f"(HTTP {exc.status}, code 1800: {exc.message}); use the web_search or "
                f"mistral_code_interpreter tool instead."
            )
        if isinstance(exc, RemoteAuthError):
            kind = "auth"
        elif exc.status in _STATUS_KINDS:
            kind = _STATUS_KINDS[exc.status]
        else:
            kind = "server" if exc.status >= 500 else "http"
        return kind, f"Mistral rejected the request (HTTP {exc.status}): {exc.message}"
    if isinstance(exc, RemoteUnavailable):
        return "transport", f"Could not reach Mistral at {base_url}: {exc}"
    if isinstance(exc, RemoteUnreadable):
        return "unreadable_result", f"Mistral returned a {subject} result corral could not read."
    if isinstance(exc, ConfigError):
        return "config", str(exc)
    return "error", f"The Mistral call failed: {type(exc).__name__}: {exc}"


def failure_result(
    exc: CorralError,
    *,
    base_url: str,
    model: str,
    subject: str,
    details: Mapping[str, Any],
) -> ToolResult:
    """An ``is_error`` result for ``exc``, carrying HTTP status and Mistral's code if any."""
    kind, text = describe_failure(exc, base_url=base_url, model=model, subject=subject)
    status = exc.status if isinstance(exc, RemoteStatusError) else None
    code = exc.code if isinstance(exc, RemoteStatusError) else None
    return ToolResult.failure(kind, text, details=details, status=status, code=code)


def fit(text: str, limit: int) -> str:
    """Fit ``text`` into ``limit`` characters, keeping its head and tail.

    The cut is marked with the engine's omission marker and the exact count, so a model
    never takes a fitted text for a complete one; the tail keeps the file links.
    """
    if len(text) <= limit:
        return text
    omitted = len(text) - limit
    while True:  # the marker's own length depends on the count's digits; settles in <= 2 steps
        room = max(0, limit - len(_marker(omitted)))
        if len(text) - room == omitted:
            break
        omitted = len(text) - room
    head = room - room // 2
    return text[:head] + _marker(omitted) + text[len(text) - (room - head) :]


def _marker(omitted: int) -> str:
    # The same words as corral.engine's output fitting, which does not export its helper.
    return f"\n[... {omitted} characters omitted ...]\n"


def first_line(text: object, limit: int = 120) -> str:
    """The first non-blank line of a description, cut at ``limit``; or ``""``."""
    if not isinstance(text, str):
        return ""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""
