"""Bash contexts: E2B's bash kernel, as a bash process an interpreter of the sandbox keeps.

E2B runs ``language="bash"`` on Jupyter's bash kernel: one bash per context whose state
(variables, functions, the working folder) lasts from one run to the next, its output (stdout
and stderr alike, through a terminal) streamed as stdout, and a run whose last command exits
non-zero an error named ``""`` whose value is the exit status. Here a bash context is a
context (an interpreter beside the session's own) whose runs are one call of a helper module
in that interpreter: it starts ``bash`` once (its own process group, the context's folder and
environment), hands it each run's code through ``eval`` with stdin at EOF, streams what it
prints until a random end mark carrying ``$?``, and ends the run with ``SystemExit(status)``
when the status is not 0, which the code interpreter reports as E2B's bash kernel does. A
run's ``env_vars`` are exported for it and then set back to the sandbox's value or unset,
as E2B does. An interrupt (the SDK's timeout) kills the bash's process group and the next
run starts a new bash, as does code that exits the shell: the kernel restarts bash too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["BASH", "run_cell"]

BASH = "bash"

_HELPER = r"""
import codecs, os, secrets, signal, subprocess, sys
shell = None
mark = ("__corral_end_" + secrets.token_hex(8) + "__").encode()
def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"
def _out(text):
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
def run(code, run_env, restore):
    global shell
    if shell is None or shell.poll() is not None:
        shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, process_group=0,
        )
    lines = [f"export {key}={_quote(value)}" for key, value in run_env.items()]
    lines.append(f"eval -- {_quote(code)} </dev/null")
    lines.append(f"printf '%s%s\\n' {mark.decode()} \"$?\"")
    for key, value in restore:
        lines.append(f"unset {key}" if value is None else f"export {key}={_quote(value)}")
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending = b""
    try:
        shell.stdin.write(("\n".join(lines) + "\n").encode("utf-8", "replace"))
        shell.stdin.flush()
        while True:
            chunk = os.read(shell.stdout.fileno(), 65536)
            if not chunk:  # the code exited the shell: its status is the run's
                _out(decoder.decode(pending, final=True))
                status = shell.wait()
                shell = None
                break
            pending += chunk
            at = pending.find(mark)
            if at >= 0:
                end = pending.find(b"\n", at)
                if end < 0:
                    continue
                _out(decoder.decode(pending[:at], final=True))
                status = int(pending[at + len(mark):end])
                break
            _out(decoder.decode(pending[:-len(mark)]))
            pending = pending[-len(mark):]
    except BaseException:
        if shell is not None:
            try:
                os.killpg(shell.pid, signal.SIGKILL)
            except OSError:
                pass
            shell.wait()
            shell = None
        raise
    if status:
        raise SystemExit(status)
"""


def run_cell(code: str, run_env: Mapping[str, str], sandbox_env: Mapping[str, str]) -> str:
    """The Python a bash context's interpreter runs for one run of ``code``: the helper
    installed when missing, then its ``run``."""
    restore = [[key, sandbox_env.get(key)] for key in run_env]
    encoded = json.dumps(json.dumps([code, dict(run_env), restore]))
    return (
        "import sys as _s, types as _t\n"
        "if '__corral_bash__' not in _s.modules:\n"
        "    _m = _t.ModuleType('__corral_bash__')\n"
        f"    exec({_HELPER!r}, _m.__dict__)\n"
        "    _s.modules['__corral_bash__'] = _m\n"
        "    del _m\n"
        "del _s, _t\n"
        f"__import__('__corral_bash__').run(*__import__('json').loads({encoded}))\n"
    )
