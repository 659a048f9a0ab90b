"""envd's PTYs: ``pty.create``, ``send_stdin``, ``resize`` and ``kill`` on a real terminal.

A ``Start`` with ``pty`` runs its program under ``corral.sandbox.inside._pty`` (a command of
the session, in the sandbox): that opens a pty on the session's own devpts and relays it.
What the terminal shows streams as envd's ``data.pty`` events; ``SendInput`` (and
``StreamInput``) with ``input.pty`` is typed at it, ``Update`` with ``pty.size`` resizes it
(the program gets SIGWINCH), ``SendSignal`` ends it (the program gets SIGHUP as its terminal
closes). Input goes as the inside helper's frames, so a resize never mixes with keystrokes.
"""

from __future__ import annotations

import sys
from typing import Any

from corral.e2b._connect import ConnectError
from corral.sandbox.inside._pty import data_frame, resize_frame

__all__ = ["MAX_SIZE", "input_frame", "pty_argv", "resize_of"]

MAX_SIZE = 1000
"""Columns or rows of a terminal at most."""
_HELPER = "corral.sandbox.inside._pty"


def _size(pty: Any) -> tuple[int, int]:
    size = pty.get("size") if isinstance(pty, dict) else None
    if not isinstance(size, dict):
        raise ConnectError("invalid_argument", "pty.size is required")
    cols, rows = size.get("cols"), size.get("rows")
    if (
        not isinstance(cols, int)
        or not isinstance(rows, int)
        or not (0 < cols <= MAX_SIZE and 0 < rows <= MAX_SIZE)
    ):
        raise ConnectError("invalid_argument", f"pty.size: cols and rows are 1 to {MAX_SIZE}")
    return cols, rows


def pty_argv(pty: Any, argv: list[str]) -> list[str]:
    """The command that runs ``argv`` on a terminal of ``pty.size``.

    The helper runs on the sandbox's own interpreter: its path is the server's, bound read-only
    into every sandbox under the same name."""
    cols, rows = _size(pty)
    return [sys.executable, "-I", "-m", _HELPER, str(cols), str(rows), *argv]


def resize_of(message: dict[str, Any]) -> bytes:
    """``Update``'s resize as the helper's frame."""
    return resize_frame(*_size(message.get("pty")))


def input_frame(data: bytes) -> bytes:
    return data_frame(data)
