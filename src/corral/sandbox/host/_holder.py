"""The engine's handle on a session holder and on its interpreters (its own, slot 0, and
those beside it: E2B's code contexts).

Calls for different slots may wait on the holder at once: one of them reads the control
socket at a time and notes what every message says, so none is read by the wrong waiter."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
from collections.abc import Callable

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
        self.alive: set[int] = set()
        """Slots whose interpreter runs, as far as the holder has said."""
        self.closed = False
        self.cgroup: SandboxCgroup | None = None
        """The session's cgroups (all its processes), when in force."""
        self._interrupts = 0
        self._reading = anyio.Lock()
        self._ready = False
        self._started: set[int] = set()
        self._exits: dict[int, int] = {}
        """Exits heard of per slot since its last start (a waiter counts from its own)."""
        self._answered: set[int] = set()
        self._awaited: set[int] = set()
        """Interrupts a caller waits to hear answered: only those answers are kept (one
        sent by a run's own signaller is answered too, and nobody asks)."""
        ctl.setblocking(False)

    @property
    def interpreter_alive(self) -> bool:
        """Whether the session's own interpreter (slot 0) runs."""
        return 0 in self.alive

    def running_interpreters(self) -> int:
        return len(self.alive)

    async def _until(self, done: Callable[[], bool]) -> None:
        """Read the holder's messages until ``done()`` (whoever reads notes each one).

        Raises:
            WorkerCrashed: the holder died, sent nonsense or did not answer in time.
        """
        while not done():
            async with self._reading:
                if done():
                    return
                self._note(await self._next())

    def _note(self, message: _HolderMessage) -> None:
        if isinstance(message, HolderReady):
            self._ready = True
        elif isinstance(message, InterpreterStarted):
            self._started.add(message.slot)
            self.alive.add(message.slot)
        elif isinstance(message, Interrupted):
            if message.n in self._awaited:
                self._answered.add(message.n)
        else:
            self.alive.discard(message.slot)
            self._exits[message.slot] = self._exits.get(message.slot, 0) + 1

    async def _next(self) -> _HolderMessage:
        with anyio.move_on_after(_CONTROL_TIMEOUT):
            packet, fds = await areceive(self._ctl)
            Descriptors(fds).close()
            if packet is None:
                raise WorkerCrashed(f"the session holder exited: {await self._said()}")
            message = decode(packet, *_HOLDER_MESSAGES)
            if message is None:
                raise WorkerCrashed("the session holder sent a malformed message")
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

    @property
    def pidfd(self) -> int | None:
        """The holder's pidfd: its namespaces are the session's (None once closed)."""
        return None if self.closed else self._pidfd

    async def wait_ready(self) -> None:
        """Raises: WorkerCrashed when the holder failed to set up."""
        await self._until(lambda: self._ready)

    def open_data_dir(self) -> int:
        """An O_PATH descriptor of the session's ``/mnt/data``, opened before any user code.

        Every later file operation resolves beneath this descriptor, never by path.
        """
        return os.open(
            f"/proc/{self.pid}/root/mnt/data",
            os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
        )

    async def start_interpreter(self, slot: int = 0) -> Worker:
        """Fork a fresh interpreter in ``slot`` and wait until it is ready.

        Raises:
            WorkerCrashed: the holder or the new interpreter died.
        """
        if self.closed:
            raise ZygoteUnavailable("the session holder is closed")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        self._started.discard(slot)
        try:
            await asend(self._ctl, StartInterpreter(slot=slot), [theirs.fileno(), out_w, err_w])
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
            signaller=functools.partial(self._signal_interpreter, slot),
        )
        worker.cgroup = self.cgroup
        try:
            await self._until(lambda: slot in self._started)
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

    async def interrupt_interpreter(self, slot: int = 0) -> None:
        """SIGINT to the interpreter in ``slot``; returns once the holder has sent it, so the
        signal is pending there before the engine reads on (never left to land in a later
        run).

        Raises:
            WorkerCrashed: the holder is gone or did not answer.
        """
        self._interrupts += 1
        number = self._interrupts
        self._awaited.add(number)
        try:
            try:
                self._tell(Interrupt(n=number, slot=slot))
            except OSError as exc:
                raise WorkerCrashed(f"the session holder is gone: {exc}") from exc
            await self._until(lambda: number in self._answered)
        finally:  # answered, or given up on: nothing of it stays
            self._awaited.discard(number)
            self._answered.discard(number)

    def _signal_interpreter(self, slot: int, signum: int) -> None:
        if signum == signal.SIGINT:
            self._interrupts += 1
            message: ControlMessage = Interrupt(n=self._interrupts, slot=slot)
        else:
            message = KillInterpreter(slot=slot)
        # If the holder is gone, every interpreter process went with it.
        with contextlib.suppress(OSError):
            self._tell(message)

    async def kill_interpreter(self, slot: int = 0) -> None:
        """Kill the interpreter in ``slot`` and what it started (slot 0: every process of
        the session but the holder); files stay."""
        if slot not in self.alive:
            return
        exits = self._exits.get(slot, 0)
        self._signal_interpreter(slot, signal.SIGKILL)
        await self._until(lambda: self._exits.get(slot, 0) > exits)

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
