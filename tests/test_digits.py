"""ASCII digits only: what ``str.isdigit`` or ``int`` would wrongly take is None."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral._digits import ascii_int


@pytest.mark.parametrize(
    "text", ["²", "³", "¹", "٣", "\uff11", "1_000", " 1", "1 ", "", "+1", "-1", "1.0", "0x1", "1e3"]
)
def test_anything_but_ascii_digits_is_none(text: str) -> None:
    assert ascii_int(text, max_digits=10) is None
    assert ascii_int(text.encode("utf-8"), max_digits=10) is None


def test_digits_signs_and_the_bound() -> None:
    assert ascii_int("0049983", max_digits=10) == 49983
    assert ascii_int(b"65535", max_digits=5) == 65535
    assert ascii_int("123456", max_digits=5) is None
    assert ascii_int("-3", max_digits=3, signed=True) == -3
    assert ascii_int("+300", max_digits=3, signed=True) == 300
    assert ascii_int("--3", max_digits=3, signed=True) is None
    assert ascii_int(b"\xb2", max_digits=3) is None  # '²' in latin-1, as a header carries it


@given(st.text(max_size=12))
def test_never_raises_and_agrees_with_int_on_ascii(text: str) -> None:
    value = ascii_int(text, max_digits=12)
    if value is not None:
        assert text.isascii()
        assert text.isdigit()
        assert value == int(text)
    elif text.isascii() and text.isdigit():
        raise AssertionError(f"{text!r} is ASCII digits")
