"""The engine's handle on a session holder and on its current interpreter."""

from __future__ import annotations

import contextlib
import os
import signal
import socket

import anyio

from corral.errors import WorkerCrashed, ZygoteUnavailable
from corral.sandbox._control_protocol import (
    ControlMessage,
    Exec,
    HolderReady,
    InterpreterExited,
    InterpreterStarted,
    Interrupt,
    Interrupted,
    KillInterpreter,
    SignalCommand,
    StartInterpreter,
    decode,
    encode,
)
from corral.sandbox._descriptors import Descriptors
from corral.sandbox._seqpacket import areceive, asend
from corral.sandbox.host._cgroups import SandboxCgroup
from corral.sandbox.host._command import Command
from corral.sandbox.host._worker import Worker, release

__all__ = ["Holder"]

_HolderMessage = HolderReady | InterpreterStarted | Interrupted | InterpreterExited
_HOLDER_MESSAGES = (HolderReady, InterpreterStarted, Interrupted, InterpreterExited)

_CONTROL_TIMEOUT = 10.0  # seconds for the holder to fork, kill or answer; it runs no user code


class Holder:
    """A session's holder process: its files' keeper and the parent of its interpreter."""

    def __init__(
        self,
        pid: int,
        pidfd: int,
        ctl: socket.socket,
        out_fd: int,
        err_fd: int,
        *,
        outer_id: int,
    ) -> None:
        self.pid = pid
        self.outer_id = outer_id
        """The host uid and gid of this session's processes (its own, for its whole life)."""
        self._pidfd = pidfd
        self._ctl = ctl
        self._out = out_fd
        self._err = err_fd
        self.interpreter_alive = False
        self.closed = False
        self.cgroup: SandboxCgroup | None = None
        """The session's cgroups (all its processes), when in force."""
        self._interrupts = 0
        ctl.setblocking(False)

    async def _next(self) -> _HolderMessage:
        with anyio.move_on_after(_CONTROL_TIMEOUT):
            packet, fds = await areceive(self._ctl)
            Descriptors(fds).close()
            if packet is None:
                raise WorkerCrashed(f"the session holder exited: {await self._said()}")
            message = decode(packet, *_HOLDER_MESSAGES)
            if message is None:
                raise WorkerCrashed("the session holder sent a malformed message")
            if isinstance(message, InterpreterExited):
                self.interpreter_alive = False
            return message
        raise WorkerCrashed("the session holder did not answer")

    async def _said(self) -> str:
        """What the holder wrote to stderr before it died (it writes once, then exits)."""
        with anyio.move_on_after(1):
            await anyio.wait_readable(self._err)
        try:
            os.set_blocking(self._err, False)
            return os.read(self._err, 4096).decode(errors="replace").strip()
        except OSError:
            return ""

    async def _expect(self, kind: type[_HolderMessage]) -> None:
        while not isinstance(await self._next(), kind):
            pass

    @property
    def pidfd(self) -> int | None:
        """The holder's pidfd: its namespaces are the session's (None once closed)."""
        return None if self.closed else self._pidfd

    async def wait_ready(self) -> None:
        """Raises: WorkerCrashed when the holder failed to set up."""
        await self._expect(HolderReady)

    def open_data_dir(self) -> int:
        """An O_PATH descriptor of the session's ``/mnt/data``, opened before any user code.

        Every later file operation resolves beneath this descriptor, never by path.
        """
        return os.open(
            f"/proc/{self.pid}/root/mnt/data",
            os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
        )

    async def start_interpreter(self) -> Worker:
        """Fork a fresh interpreter and wait until it is ready.

        Raises:
            WorkerCrashed: the holder or the new interpreter died.
        """
        if self.closed:
            raise ZygoteUnavailable("the session holder is closed")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            await asend(self._ctl, StartInterpreter(), [theirs.fileno(), out_w, err_w])
        except BaseException as exc:  # cancelled too: nobody else holds our ends
            ours.close()
            os.close(out_r)
            os.close(err_r)
            if isinstance(exc, OSError):
                raise WorkerCrashed(f"the session holder is gone: {exc}") from exc
            raise
        finally:
            theirs.close()
            os.close(out_w)
            os.close(err_w)
        worker = Worker(
            self.pid,
            None,
            ours,
            out_r,
            err_r,
            outer_id=self.outer_id,
            signaller=self._signal_interpreter,
        )
        worker.cgroup = self.cgroup
        try:
            await self._expect(InterpreterStarted)
            self.interpreter_alive = True
            await worker.wait_ready()
        except BaseException:
            worker.close()
            raise
        return worker

    async def start_command(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        *,
        memory_bytes: int,
        cpu_seconds: int,
    ) -> Command:
        """Start a command beside the interpreter, locked down like it (``inside/_command``).

        Raises:
            WorkerCrashed: the holder is gone or refused the command.
        """
        if self.closed:
            raise ZygoteUnavailable("the session holder is closed")
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        command = Command(in_w, out_r, err_r, status_r, self._signal_command)
        request = Exec(
            argv=tuple(argv),
            env=env,
            cwd=cwd,
            memory_bytes=memory_bytes,
            cpu_seconds=cpu_seconds,
        )
        try:
            await asend(self._ctl, request, [in_r, out_w, err_w, status_w])
        except OSError as exc:
            command.close()
            raise WorkerCrashed(f"the session holder is gone: {exc}") from exc
        finally:
            for fd in (in_r, out_w, err_w, status_w):
                os.close(fd)
        try:
            with anyio.fail_after(_CONTROL_TIMEOUT):
                await command.started()
        except (TimeoutError, WorkerCrashed):
            command.close()
            raise WorkerCrashed("the session did not start the command") from None
        return command

    def _tell(self, message: ControlMessage) -> None:
        """Send without waiting: the holder reads its socket at once (it runs no user code)."""
        self._ctl.send(encode(message))

    def _signal_command(self, pid: int, signum: int) -> None:
        with contextlib.suppress(OSError, ValueError):  # ValueError: a signal it never takes
            self._tell(SignalCommand(pid=pid, signal=signum))

    async def interrupt_interpreter(self) -> None:
        """SIGINT to the interpreter; returns once the holder has sent it, so the signal is
        pending there before the engine reads on (never left to land in a later run).

        Raises:
            WorkerCrashed: the holder is gone or did not answer.
        """
        self._interrupts += 1
        number = self._interrupts
        try:
            self._tell(Interrupt(n=number))
        except OSError as exc:
            raise WorkerCrashed(f"the session holder is gone: {exc}") from exc
        while True:
            message = await self._next()
            if isinstance(message, Interrupted) and message.n == number:
                return

    def _signal_interpreter(self, signum: int) -> None:
        self._interrupts += signum == signal.SIGINT
        message = Interrupt(n=self._interrupts) if signum == signal.SIGINT else KillInterpreter()
        # If the holder is gone, every interpreter process went with it.
        with contextlib.suppress(OSError):
            self._tell(message)

    async def kill_interpreter(self) -> None:
        """Kill the interpreter and every process it started; files stay."""
        if not self.interpreter_alive:
            return
        self._signal_interpreter(signal.SIGKILL)
        await self._expect(InterpreterExited)

    def kill(self) -> None:
        """SIGKILL the holder, and with it every process of the session; fds stay open."""
        if not self.closed:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        """Kill the holder: the whole session namespace and its files go with it."""
        if self.closed:
            return
        self.kill()
        self.closed = True
        release(self._ctl, self._out, self._err, self._pidfd)
