"""A session's holder: init of the session's namespaces, keeper of its files.

The holder owns the session's tmpfs (``/mnt/data``, sized to the disk quota) and forks one
interpreter at a time on request. Restarting the interpreter kills every process in the
namespace but the holder, so variables and stray processes go while files stay. User code
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


def _start_interpreter(fds: list[int], cwd: str, seccomp_bpf: bytes, static: StaticLimits) -> int:
    pid = os.fork()
    if pid == 0:

        def interpreter() -> None:
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
    interpreter: int | None = None
    commands = Commands(seccomp_bpf, static)
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
                    if interpreter is None and len(fds) == _INTERPRETER_FDS:
                        interpreter = _start_interpreter(fds, cwd, seccomp_bpf, static)
                        send(control, InterpreterStarted())
                        continue
                elif isinstance(message, Interrupt):
                    if interpreter is not None:
                        os.kill(interpreter, signal.SIGINT)
                    send(control, Interrupted(n=message.n))  # the engine waits for it
                elif isinstance(message, Exec):
                    commands.start(message, fds, cwd)
                    continue
                elif isinstance(message, SignalCommand):
                    commands.signal(message)
                elif isinstance(message, KillInterpreter):
                    _kill_everyone_else(commands)
                    if interpreter is not None:
                        interpreter = None
                        send(control, InterpreterExited(code=-signal.SIGKILL))
                Descriptors(fds).close()
                continue
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
            while True:
                try:
                    pid, code = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if commands.reaped(pid, code):
                    continue
                if pid == interpreter:
                    interpreter = None
                    _kill_everyone_else(commands)
                    send(control, InterpreterExited(code=os.waitstatus_to_exitcode(code)))
