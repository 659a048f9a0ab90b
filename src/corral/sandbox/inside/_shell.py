"""Notebook shell syntax in a cell: ``!cmd``, ``x = !cmd``, ``%pip``, ``%cd`` and ``%%bash``.

Model-written code is notebook code, and the first thing an agent runs when an import fails
is ``!pip install`` or ``%pip install``. A cell that does not parse as Python and has such a
line is rewritten by IPython's own input transformer (the same rewriting Jupyter does: a
shell line becomes ``get_ipython().system(...)``) and run against :class:`Shell`, a small
stand-in for IPython's shell with just what those calls need. Python that parses is never
rewritten, so ordinary code pays nothing.

Commands run under ``/bin/sh`` inside the sandbox like any subprocess of the code, their
output streamed into the cell's stdout as it arrives. ``%pip`` is the interpreter's own pip
(``python -m pip``), which installs into the session's own prefix (``_isolate.PACKAGES``).
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from typing import Any

__all__ = ["SHELL_NAME", "Shell", "rewrite"]

SHELL_NAME = "get_ipython"
"""The name IPython's rewritten code calls; the cell's namespace gets it when rewritten."""
_SHELL = "/bin/sh"
_READ = 65536  # bytes per read of a command's output
_SHELL_SIGNS = ("!", "%")
_QUIET = frozenset({"matplotlib", "load_ext", "config"})
"""Notebook set-up lines that have nothing to do here (figures are captured anyway)."""


def rewrite(code: str) -> str | None:
    """``code`` with its notebook syntax as Python, or None when it has none (or the
    rewritten code does not parse either: the original SyntaxError is the one to show)."""
    if not any(sign in code for sign in _SHELL_SIGNS):
        return None
    try:
        ast.parse(code)
    except SyntaxError:
        pass
    else:
        return None  # Python as it is
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return None
    rewritten: str = TransformerManager().transform_cell(code)  # type: ignore[no-untyped-call]
    try:
        ast.parse(rewritten)
    except SyntaxError:
        return None
    return rewritten


class UsageError(Exception):
    """A magic this shell does not have, or one given wrong arguments."""


class _Lines(list[str]):
    """``x = !cmd``'s value: the output's lines, as IPython's SList, with ``.n`` and ``.s``."""

    @property
    def n(self) -> str:
        return "\n".join(self)

    @property
    def s(self) -> str:
        return " ".join(self)


class Shell:
    """What IPython's rewritten shell lines call, for the namespace of one interpreter."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.user_ns = namespace

    def __call__(self) -> Shell:
        return self  # ``get_ipython()`` is this object

    def _expand(self, command: str, depth: int) -> str:
        """``$name`` and ``{expression}`` from the caller's variables, as IPython does; a
        command that does not expand is run as written."""
        from IPython.utils.text import DollarFormatter

        frame = sys._getframe(depth + 1)
        names = {**frame.f_globals, **frame.f_locals}
        try:
            return DollarFormatter().vformat(command, (), names)
        except Exception:  # noqa: BLE001 - IPython, too, runs a command it cannot expand
            return command

    def _run(self, command: str, *, capture: bool) -> tuple[int, str]:
        process = subprocess.Popen(
            [_SHELL, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert process.stdout is not None
        kept: list[bytes] = []
        try:
            while chunk := os.read(process.stdout.fileno(), _READ):
                if capture:
                    kept.append(chunk)
                else:
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
        except BaseException:  # an interrupt ends the command with the cell
            process.kill()
            raise
        finally:
            process.stdout.close()
            code = process.wait()
        self.user_ns["_exit_code"] = code
        importlib.invalidate_caches()  # what a command installed is importable at once
        return code, b"".join(kept).decode(errors="replace")

    def system(self, command: str, _depth: int = 1) -> None:
        """``!command``: run it, its output (both streams) into the cell's stdout.

        Raises:
            subprocess.CalledProcessError: it failed. A kernel would only print its output;
                here the run's error says so, so that an agent reads a failed ``!pip
                install`` as the failure it is.
        """
        expanded = self._expand(command, _depth)
        code, _ = self._run(expanded, capture=False)
        if code != 0:
            raise subprocess.CalledProcessError(code, expanded)

    def getoutput(self, command: str, split: bool = True, depth: int = 0) -> Any:
        """``x = !command``: its output's lines."""
        _, text = self._run(self._expand(command, depth + 1), capture=True)
        return _Lines(text.splitlines()) if split else text

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> Any:
        line = self._expand(line, _stack_depth)
        if name in _QUIET:
            return None
        if name in ("pip", "conda", "uv"):
            program = "uv pip" if name == "uv" else f"{sys.executable} -m pip"
            code, _ = self._run(f"{program} {line}", capture=False)
            if code != 0:
                raise subprocess.CalledProcessError(code, f"{name} {line}")
            print("Note: you may need to restart the kernel to use updated packages.")
            return None
        if name == "cd":
            os.chdir(os.path.expanduser(line.strip() or "~"))
            print(os.getcwd())
            return None
        if name == "pwd":
            return os.getcwd()
        if name in ("sx", "system"):
            return self.getoutput(line, depth=_stack_depth)
        raise UsageError(f"Line magic function `%{name}` not found (corral runs a few only).")

    def run_cell_magic(self, name: str, line: str, cell: str) -> Any:
        if name in ("bash", "sh", "script"):
            program = "/bin/bash" if name != "sh" and os.path.exists("/bin/bash") else _SHELL
            code, _ = self._run(f"{program} -c {_quote(cell)}", capture=False)
            if code != 0:  # as IPython's %%bash raises
                raise subprocess.CalledProcessError(code, cell)
            return None
        if name == "writefile":
            path = line.split()[-1] if line.split() else ""
            if not path:
                raise UsageError("%%writefile needs a file name")
            mode = "a" if "-a" in line.split()[:-1] else "w"
            with open(os.path.expanduser(path), mode) as handle:
                handle.write(cell)
            print(f"{'Appending to' if mode == 'a' else 'Writing'} {path}")
            return None
        raise UsageError(f"Cell magic `%%{name}` not found (corral runs a few only).")


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
