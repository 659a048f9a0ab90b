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

from corral.sandbox._control_protocol import Exec, SignalCommand, StaticLimits
from corral.sandbox._descriptors import Descriptors
from corral.sandbox.inside import _isolate
from corral.sandbox.inside._child import run_then_exit

__all__ = ["MAX_COMMANDS", "Commands"]

MAX_COMMANDS = 16
"""Commands one session may run at once; more are refused (pid ``-1``)."""
_EXEC_FDS = 4  # stdin, stdout, stderr and the status pipe


def _write(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):  # the engine stopped listening
        os.write(fd, text.encode())


class Commands:
    """The commands the holder has started and not yet reaped, by pid."""

    def __init__(self, seccomp_bpf: bytes, static: StaticLimits) -> None:
        self._seccomp_bpf = seccomp_bpf
        self._static = static
        self._status: dict[int, int] = {}

    def start(self, request: Exec, fds: list[int], default_cwd: str) -> None:
        """Fork the command of an ``Exec``: fds are stdin, stdout, stderr, status."""
        with Descriptors(fds) as held:
            if len(fds) != _EXEC_FDS:
                return
            status_fd = fds[3]
            if len(self._status) >= MAX_COMMANDS:
                _write(status_fd, "-1\n")
                return
            pid = os.fork()
            if pid == 0:
                run_then_exit(
                    "command", lambda: self._exec(fds, request, request.cwd or default_cwd)
                )
            with contextlib.suppress(OSError):  # both sides set it: no signal finds it unset
                os.setpgid(pid, pid)
            self._status[pid] = held.take(status_fd)
        _write(status_fd, f"{pid}\n")

    def _exec(self, fds: list[int], request: Exec, cwd: str) -> None:
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
            pids=self._static.pids,
            file_bytes=self._static.file_bytes,
            open_files=self._static.open_files,
        )
        memory = request.memory_bytes
        cpu = min(request.cpu_seconds, _isolate.CPU_CEILING_SECONDS)
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        argv = request.argv
        os.execvpe(argv[0], argv, {**os.environ, **request.env})  # noqa: S606 - argv, no shell

    def signal(self, request: SignalCommand) -> None:
        """Signal a command's process group; anything but a live command's pid is ignored."""
        if request.pid in self._status:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(request.pid, request.signal)

    def reaped(self, pid: int, status: int) -> bool:
        """Report a reaped child if it was a command; False when it was not one."""
        fd = self._status.pop(pid, None)
        if fd is None:
            return False
        _write(fd, f"{os.waitstatus_to_exitcode(status)}\n")
        os.close(fd)
        return True
