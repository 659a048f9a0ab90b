"""Bash contexts: E2B's bash kernel, as a bash process an interpreter of the sandbox keeps.

E2B runs ``language="bash"`` on Jupyter's bash kernel: one bash per context whose state
(variables, functions, the working folder) lasts from one run to the next, its output (stdout
and stderr alike, through a terminal) streamed as stdout, and a run whose last command exits
non-zero an error named ``""`` whose value is the exit status. Here a bash context is a
context (an interpreter beside the session's own) whose runs are one call of a helper module
in that interpreter: it starts ``bash`` once (in the interpreter's process group, the
context's folder and environment), hands it each run's code through ``builtin eval`` with
stdin at EOF, streams what it prints, and learns that the run is over, and its status, from a
pipe of its own that the code cannot write to (closed for it, its number read-only); a
status that is not 0 ends the run with ``SystemExit(status)``, which the code interpreter
reports as E2B's bash kernel does. A run's ``env_vars`` (shell names only) are exported for it
and then set back to the sandbox's value or unset, as E2B does. An interrupt (the SDK's
timeout) kills the shell and everything of the interpreter's process group but the
interpreter, and the next run starts a new bash, as does code that exits the shell (the
kernel restarts bash too); closing the context kills that group with the interpreter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

__all__ = ["BASH", "SHELL_NAME", "run_cell"]

BASH = "bash"

_HELPER = r"""
import codecs, os, select, signal, subprocess, sys
shell = None
status_fd = -1
def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"
def _out(text):
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
def _start():
    global shell, status_fd
    read_end, write_end = os.pipe()
    try:
        shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, pass_fds=(write_end,),
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    status_fd = read_end
    shell.stdin.write(f"declare -r __corral_status={write_end}\n".encode())
def _stop():
    global shell, status_fd
    mine, group = os.getpid(), os.getpgrp()
    for name in os.listdir("/proc"):  # the shell and what it runs share our process group
        if name.isdigit() and int(name) != mine:
            try:
                with open(f"/proc/{name}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[3]) == group:
                        os.kill(int(name), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass
    if shell is not None:
        shell.wait()
    if status_fd >= 0:
        os.close(status_fd)
    shell, status_fd = None, -1
def _drain(fd, decoder):
    os.set_blocking(fd, False)
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            _out(decoder.decode(chunk))
    finally:
        os.set_blocking(fd, True)
def run(code, run_env, restore):
    if shell is None or shell.poll() is not None:
        if shell is not None:
            _stop()
        _start()
    lines = [f"export {key}={_quote(value)}" for key, value in run_env.items()]
    lines.append(f"builtin eval -- {_quote(code)} </dev/null {{__corral_status}}>&-")
    lines.append('{ builtin printf "%s\\n" "$?" >&"$__corral_status"; } 2>/dev/null')
    for key, value in restore:
        lines.append(f"unset {key}" if value is None else f"export {key}={_quote(value)}")
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    output, status_text, status = shell.stdout.fileno(), b"", None
    watched = [output, status_fd]
    try:
        shell.stdin.write(("\n".join(lines) + "\n").encode("utf-8", "replace"))
        shell.stdin.flush()
        while status is None:
            ready, _, _ = select.select(watched, [], [])
            if output in ready:
                chunk = os.read(output, 65536)
                if chunk:
                    _out(decoder.decode(chunk))
                else:  # the shell's stdout is closed (exec >&-): only its status is left
                    watched.remove(output)
            if status_fd in ready:
                piece = os.read(status_fd, 64)
                status_text += piece
                if output in watched and (not piece or status_text.endswith(b"\n")):
                    _drain(output, decoder)
                if not piece:  # the code exited the shell: its status is the run's
                    status = shell.wait()
                    _stop()
                elif status_text.endswith(b"\n"):
                    status = int(status_text)
        _out(decoder.decode(b"", final=True))
    except BaseException:
        _stop()
        raise
    if status:
        raise SystemExit(status)
"""


SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What a variable a run's ``env_vars`` sets in a shell may be named."""


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
