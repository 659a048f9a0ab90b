"""Integers from the wire, spelt in ASCII digits only.

``str.isdigit()`` is true for ``'²'`` and other digits ``int()`` refuses, so a check with one and
a conversion with the other answers a header such as ``E2b-Sandbox-Port: ²`` with a 500; and
``int()`` itself reads ``'٣'``, ``'1_000'`` and surrounding blanks, none of which a header,
a field or a message from a sandbox means. Whatever a client or a worker sends is read here.
"""

from __future__ import annotations

import re

__all__ = ["ascii_int"]

_UNSIGNED = re.compile(r"[0-9]+", re.ASCII)
_SIGNED = re.compile(r"[+-]?[0-9]+", re.ASCII)


def ascii_int(text: str | bytes, *, max_digits: int, signed: bool = False) -> int | None:
    """The integer ``text`` spells in ASCII digits, or None.

    Args:
        text: the whole value; nothing around the digits (no blank, no ``_``).
        max_digits: longer spellings are None (a bound on the work, and on what a field means).
        signed: accept one leading ``+`` or ``-``.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            return None
    pattern = _SIGNED if signed else _UNSIGNED
    if pattern.fullmatch(text) is None or len(text.lstrip("+-")) > max_digits:
        return None
    return int(text)
