"""Fitting inside the sandbox: within the ceilings, with exact counts; names escaped."""

from __future__ import annotations

import os

import pytest

from corral.engine._fit import marker
from corral.sandbox._protocol import (
    HEADER,
    MAX_JSON_NODES,
    Display,
    FittedText,
    decode_message,
)
from corral.sandbox.inside._fitting import DisplaySender, clip, escape_name, fit_result, fit_text


def _payload(frame: bytes) -> bytes:
    return frame[HEADER.size :]


def test_fitting_keeps_exact_counts() -> None:
    text = "a" * 1000 + "b" * 1000
    fitted = fit_text(text, 100)
    assert fitted == FittedText("a" * 100, "b" * 100, 1800)
    assert fit_text("short", 100) == FittedText("short", "", 0)
    clipped = clip("z" * 10_000, 100)
    assert len(clipped) <= 100
    assert f"\n[... {10_000 - clipped.count('z')} characters omitted ...]\n" in clipped


def test_result_fitting_drops_oversized_text_and_keeps_the_rest() -> None:
    others, plain = fit_result(
        {"text/plain": "p" * 500, "text/html": "h" * 500, "image/png": "i" * 50},
        100,
        1000,
        MAX_JSON_NODES,
    )
    assert others == {"image/png": "i" * 50}
    assert plain == FittedText("p" * 100, "p" * 100, 300)


def test_the_display_sender_fits_counts_and_omits() -> None:
    sent: list[bytes] = []
    sender = DisplaySender()
    sender.reset(sent.append, max_items=2, max_bytes=1000, ceiling=60)
    sender({"text/plain": "q" * 100, "text/html": "h" * 100})
    sender({"image/png": "A" * 5000})  # over the byte budget
    sender({"text/plain": "ok"})
    sender({"text/plain": "one too many"})
    assert sender.omitted == 2
    shown = [decode_message(_payload(f)) for f in sent]
    assert shown[1] == Display({"text/plain": "ok"})
    first = shown[0]
    assert isinstance(first, Display)
    assert "text/html" not in first.data
    text = first.data["text/plain"]
    assert len(text) <= 60
    assert marker(100 - text.count("q")) in text


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain.txt", "plain.txt"),
        ("é中", "é中"),
        (os.fsdecode(b"\xff"), "\\xff"),
        ("a\nb", "a\\nb"),
        ("\x1b[31m", "\\x1b[31m"),
        ("rtl\u202etxt", "rtl\\u202etxt"),
    ],
)
def test_names_are_escaped_printable_text(name: str, shown: str) -> None:
    escaped = escape_name(name)
    assert escaped == shown
    assert escaped.isprintable()
    escaped.encode("utf-8")  # never a lone surrogate


def test_values_that_are_not_json_are_dropped_not_fatal() -> None:
    loop: list[object] = []
    loop.append(loop)
    others, plain = fit_result(
        {"text/plain": "p", "application/json": {1, 2}, "application/x-loop": loop},
        100,
        1000,
        MAX_JSON_NODES,
    )
    assert others is None
    assert plain == FittedText("p", "", 0)
