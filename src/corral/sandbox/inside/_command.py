"""Commands in a session's sandbox: processes the holder starts beside the interpreter.

A command is a program (``/bin/bash -l -c ...`` for E2B's ``commands.run``) forked by the
holder and locked down exactly like the session's interpreter before it executes anything:
same namespaces, files, seccomp policy, no capabilities, the static rlimits, plus the run's
memory and CPU bounds. The holder reports each command's pid and then its exit status on a
pipe the engine handed it with the request, so the control socket keeps its one
request/answer stream. Restarting the interpreter kills every process of the namespace, the
commands with it, like any other stray process.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Mapping
from typing import Any

from corral.sandbox.inside import _isolate, _runner

__all__ = ["MAX_COMMANDS", "Commands"]

MAX_COMMANDS = 16
"""Commands one session may run at once; more are refused (pid ``-1``)."""
_SIGNALS = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT})
_MAX_ARGS = 4096
_MAX_ENV = 4096


def _texts(value: Any, limit: int) -> list[str] | None:
    if not isinstance(value, list) or len(value) > limit:
        return None
    if not all(isinstance(item, str) and "\0" not in item for item in value):
        return None
    return value


def _environment(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict) or len(value) > _MAX_ENV:
        return None
    env: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str) or not key or "=" in key or "\0" in key + item:
            return None
        env[key] = item
    return env


def _parse(message: Mapping[str, Any]) -> tuple[list[str], dict[str, str], str, int, int] | None:
    argv = _texts(message.get("argv"), _MAX_ARGS)
    env = _environment(message.get("env"))
    cwd, memory, cpu = message.get("cwd"), message.get("memory_bytes"), message.get("cpu_seconds")
    if not argv or env is None or not isinstance(cwd, str):
        return None
    bounds = [v for v in (memory, cpu) if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if len(bounds) != 2:
        return None
    return argv, env, cwd, bounds[0], bounds[1]


def _write(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):  # the engine stopped listening
        os.write(fd, text.encode())


class Commands:
    """The commands the holder has started and not yet reaped, by pid."""

    def __init__(self, seccomp_bpf: bytes, static: _runner.StaticLimits) -> None:
        self._seccomp_bpf = seccomp_bpf
        self._static = static
        self._status: dict[int, int] = {}

    def start(self, message: Mapping[str, Any], fds: list[int], default_cwd: str) -> None:
        """Fork the command of an ``exec`` request: fds are stdin, stdout, stderr, status."""
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return
        status_fd = fds[3]
        request = _parse(message)
        if request is None or len(self._status) >= MAX_COMMANDS:
            _write(status_fd, "-1\n")
            for fd in fds:
                os.close(fd)
            return
        argv, env, cwd, memory, cpu = request
        pid = os.fork()
        if pid == 0:
            _runner.run_then_exit(
                "command",
                lambda: self._exec(fds, argv, env, cwd or default_cwd, memory, cpu),
            )
        with contextlib.suppress(OSError):  # both sides set it: no signal finds it unset
            os.setpgid(pid, pid)
        for fd in fds[:3]:
            os.close(fd)
        self._status[pid] = status_fd
        _write(status_fd, f"{pid}\n")

    def _exec(
        self,
        fds: list[int],
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        memory_bytes: int,
        cpu_seconds: int,
    ) -> None:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGPIPE, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.closerange(3, 1 << 20)
        os.setpgid(0, 0)  # its own process group, so a signal reaches what it started too
        os.chdir(cwd)
        _isolate.lock_down(
            seccomp_bpf=self._seccomp_bpf,
            pids=self._static["pids"],
            file_bytes=self._static["file_bytes"],
            open_files=self._static["open_files"],
        )
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        os.execvpe(argv[0], argv, {**os.environ, **env})  # noqa: S606 - argv, not a shell line

    def signal(self, message: Mapping[str, Any]) -> None:
        """Signal a command's process group; anything but a live command's pid is ignored."""
        pid, signum = message.get("pid"), message.get("signal")
        if isinstance(pid, int) and pid in self._status and signum in _SIGNALS:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, int(signum))

    def reaped(self, pid: int, status: int) -> bool:
        """Report a reaped child if it was a command; False when it was not one."""
        fd = self._status.pop(pid, None)
        if fd is None:
            return False
        _write(fd, f"{os.waitstatus_to_exitcode(status)}\n")
        os.close(fd)
        return True
