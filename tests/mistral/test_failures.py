from __future__ import annotations

import pytest

from corral.errors import (
    ConfigError,
    CorralError,
    RemoteAuthError,
    RemoteStatusError,
    RemoteTimeout,
    RemoteUnreadable,
    ToolError,
)
from corral.mistral._failures import describe_failure, first_line, fit


@pytest.mark.parametrize(
    ("exc", "kind", "text"),
    [
        (RemoteStatusError(400, "nope", "3004"), "model_unsupported", "The search model 'm'"),
        (RemoteStatusError(400, "WebSearchTool", "1800"), "tool_unsupported", "server tool 's'"),
        (RemoteAuthError(403, "Forbidden"), "auth", "(HTTP 403): Forbidden"),
        (RemoteStatusError(404, "gone"), "not_found", "(HTTP 404): gone"),
        (RemoteStatusError(422, "bad"), "invalid_request", "(HTTP 422): bad"),
        (RemoteStatusError(429, "slow", "1300"), "rate_limited", "(HTTP 429): slow"),
        (RemoteStatusError(418, "teapot"), "http", "(HTTP 418): teapot"),
        (RemoteStatusError(502, "bad gateway"), "server", "(HTTP 502): bad gateway"),
        (RemoteTimeout("timed out"), "transport", "Could not reach Mistral at http://b: timed out"),
        (RemoteUnreadable("x"), "unreadable_result", "Mistral returned a s result"),
        (ConfigError("MISTRAL_API_KEY is not set"), "config", "MISTRAL_API_KEY is not set"),
        (ToolError("odd"), "error", "ToolError: odd"),
    ],
)
def test_every_failure_has_a_kind_and_a_sentence(exc: CorralError, kind: str, text: str) -> None:
    got_kind, got_text = describe_failure(exc, base_url="http://b", model="m", subject="s")
    assert got_kind == kind
    assert text in got_text


def test_fit_leaves_short_text_alone_and_marks_cuts() -> None:
    assert fit("abc", 3) == "abc"
    cut = fit("a" * 1000, 60)
    assert len(cut) == 60
    assert "[... 974 characters omitted ...]" in cut
    assert fit("abc" * 10, 5) == "\n[... 30 characters omitted ...]\n"  # no room at all


def test_first_line() -> None:
    assert first_line("\n  \n  Send mail.\nMore") == "Send mail."
    assert first_line("x" * 200) == "x" * 119 + "…"
    assert first_line(None) == ""
    assert first_line("   ") == ""
