"""IPython's shell escapes in E2B code (``!cmd``, ``%pip``, ``%%bash``), as a kernel runs them.

E2B runs code in a Jupyter kernel, so agents send ``!pip install ...`` lines (smolagents'
E2B executor does before any tool). corral's interpreter is plain Python: a cell with such
lines is rewritten by IPython's own input transformer, and the calls it produces go to a small
shell in the sandbox (``__corral_e2b__.shell``, see ``_contexts``), which runs them as
processes of the same sandbox. Line numbers are kept.
"""

from __future__ import annotations

import re

__all__ = ["SHELL_SOURCE", "transform"]

_MAGIC_LINE = re.compile(r"^[ \t]*[!%]", re.MULTILINE)

SHELL_SOURCE = """
import subprocess
class Shell:
    def system(self, cmd):
        sys.stdout.flush()
        sys.stderr.flush()
        subprocess.run(cmd, shell=True)
    def getoutput(self, cmd, split=True):
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
        return out.splitlines() if split else out
    def run_line_magic(self, name, line, _stack_depth=1):
        if name in ("pip", "conda"):
            return self.system(f"{sys.executable} -m pip {line}")
        if name == "cd":
            return os.chdir(os.path.expanduser(line.strip() or "~"))
        if name in ("matplotlib", "load_ext", "config"):
            return None
        raise NotImplementedError(f"%{name} is not available in corral's sandbox")
    def run_cell_magic(self, name, line, cell):
        if name in ("bash", "sh", "script"):
            return self.system("/bin/bash -c " + __import__("shlex").quote(cell))
        raise NotImplementedError(f"%%{name} is not available in corral's sandbox")
shell = Shell()
"""
"""Python run inside the sandbox's interpreter (with ``os`` and ``sys`` imported)."""


def transform(code: str) -> str:
    """``code`` with IPython's shell escapes as calls to the sandbox's shell; else unchanged."""
    if not _MAGIC_LINE.search(code):
        return code
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return code
    try:
        rewritten = str(TransformerManager().transform_cell(code))  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - the interpreter reports the code's own SyntaxError
        return code
    return rewritten.replace("get_ipython().", "__import__('__corral_e2b__').shell.")
