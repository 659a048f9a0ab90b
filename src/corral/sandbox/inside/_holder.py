"""A session's holder: init of the session's namespaces, keeper of its files.

The holder owns the session's tmpfs (``/mnt/data``, sized to the disk quota) and forks
interpreters on request: the session's own (slot 0) and up to ``MAX_INTERPRETERS - 1`` beside
it (E2B's code contexts, which run side by side). Restarting the session's own interpreter
kills every process in the namespace but the holder, so variables and stray processes go while
files stay; one beside it is its own process group, killed with what it left in that group
(what left the group dies with the session, bounded by its cgroup all along). User code
runs only in interpreters, which drop every privilege on their first request; the holder
keeps its capabilities and is not dumpable, so an interpreter can neither signal it (init
ignores signals it has no handler for), trace it nor read its memory.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket

from corral.sandbox import _syscalls as sc
from corral.sandbox._control_protocol import (
    Exec,
    HolderReady,
    InterpreterExited,
    InterpreterStarted,
    Interrupt,
    Interrupted,
    KillInterpreter,
    SignalCommand,
    StartInterpreter,
    StaticLimits,
    decode,
)
from corral.sandbox._descriptors import Descriptors
from corral.sandbox._seqpacket import receive, send
from corral.sandbox.inside import _isolate, _runner
from corral.sandbox.inside._child import run_then_exit
from corral.sandbox.inside._command import Commands

__all__ = ["holder_main"]

_CONTROL_FD = 3
_INTERPRETER_FDS = 3  # its protocol socket, stdout and stderr


def _kill_everyone_else(commands: Commands) -> None:
    with contextlib.suppress(ProcessLookupError):  # nobody else left
        os.kill(-1, signal.SIGKILL)  # as init: every process of the namespace but us
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        commands.reaped(pid, status)


def _start_interpreter(
    fds: list[int], cwd: str, seccomp_bpf: bytes, static: StaticLimits, *, group: bool
) -> int:
    pid = os.fork()
    if pid == 0:

        def interpreter() -> None:
            if group:  # one beside the session's own: what it starts, it is killed with
                os.setpgid(0, 0)
            signal.set_wakeup_fd(-1)
            os.dup2(fds[1], 1)
            os.dup2(fds[2], 2)
            os.dup2(fds[0], _runner.PROTOCOL_FD)
            os.closerange(_runner.PROTOCOL_FD + 1, 1 << 20)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _runner.serve(
                cwd=cwd, session=True, seccomp_bpf=seccomp_bpf, static=static, inputs_fd=None
            )

        run_then_exit("interpreter", interpreter)
    if group:  # as the child does: whichever runs first, no kill of the group misses it
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
    for fd in fds:
        os.close(fd)
    return pid


def holder_main(
    *,
    template: str,
    staged: list[tuple[str, str]],
    disk_bytes: int,
    seccomp_bpf: bytes,
    static: StaticLimits,
) -> None:
    """Enter the sandbox in a freshly cloned session worker and serve its control socket."""
    cwd, inputs_fd = _isolate.enter(
        template=template,
        staged=staged,
        work_bytes=static.work_bytes,
        session_disk_bytes=disk_bytes,
    )
    os.close(inputs_fd)  # sessions take files through the files API instead
    sc.set_dumpable(False)
    control = socket.socket(fileno=_CONTROL_FD)
    control.setblocking(True)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send(control, HolderReady())
    interpreters = _Interpreters(control, Commands(seccomp_bpf, static))
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                packet, fds = receive(control)
                if packet is None:
                    return
                message = decode(
                    packet, StartInterpreter, Interrupt, Exec, SignalCommand, KillInterpreter
                )
                if isinstance(message, StartInterpreter):
                    slot = message.slot
                    if slot not in interpreters.pids and len(fds) == _INTERPRETER_FDS:
                        interpreters.pids[slot] = _start_interpreter(
                            fds, cwd, seccomp_bpf, static, group=slot != 0
                        )
                        send(control, InterpreterStarted(slot=slot))
                        continue
                elif isinstance(message, Interrupt):
                    pid = interpreters.pids.get(message.slot)
                    if pid is not None:
                        os.kill(pid, signal.SIGINT)
                    send(control, Interrupted(n=message.n))  # the engine waits for it
                elif isinstance(message, Exec):
                    interpreters.commands.start(message, fds, cwd)
                    continue
                elif isinstance(message, SignalCommand):
                    interpreters.commands.signal(message)
                elif isinstance(message, KillInterpreter):
                    interpreters.kill(message.slot)
                Descriptors(fds).close()
                continue
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
            interpreters.reap()


class _Interpreters:
    """The holder's interpreters by slot, and its commands: who is killed with whom."""

    def __init__(self, control: socket.socket, commands: Commands) -> None:
        self._control = control
        self.commands = commands
        self.pids: dict[int, int] = {}

    def kill(self, slot: int) -> None:
        """Kill the interpreter of ``slot`` (slot 0: everyone) and say so; silent for a
        slot that runs none (its exit was said when it was reaped)."""
        if slot == 0:
            _kill_everyone_else(self.commands)
            self._exited(sorted(self.pids), -signal.SIGKILL)
            return
        pid = self.pids.get(slot)
        if pid is None:
            return
        # The pid too: its code may have moved itself to another group of the session. Not
        # reaped yet, so the number is still its own.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        # Its slot is free at once; it is reaped, unheard of, once it is gone.
        self._exited([slot], -signal.SIGKILL)

    def reap(self) -> None:
        while True:
            try:
                # A peek first: an interpreter's group is killed while its leader, a zombie,
                # still holds the number (reaped, it could be another process's group).
                seen = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if seen is None or seen.si_pid == 0:
                return
            slot = next((s for s, p in self.pids.items() if p == seen.si_pid), None)
            if slot:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(seen.si_pid, signal.SIGKILL)  # what it left in its group
            pid, code = os.waitpid(seen.si_pid, 0)
            if self.commands.reaped(pid, code):
                continue
            if slot == 0:
                self.pids.pop(0)
                _kill_everyone_else(self.commands)
                self._send_exit(0, os.waitstatus_to_exitcode(code))
                self._exited(sorted(self.pids), -signal.SIGKILL)
            elif slot is not None:
                self.pids.pop(slot)
                self._send_exit(slot, os.waitstatus_to_exitcode(code))

    def _exited(self, slots: list[int], code: int) -> None:
        for slot in slots:
            self.pids.pop(slot, None)
            self._send_exit(slot, code)

    def _send_exit(self, slot: int, code: int) -> None:
        send(self._control, InterpreterExited(code=code, slot=slot))
