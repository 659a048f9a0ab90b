"""The engine's handle on one worker: its protocol socket, output pipes and pidfd.

Stdout and stderr arrive on pipes the worker holds as fds 1 and 2, so output from C code and
subprocesses is captured too; the engine consumes them while the code runs, into sinks that
keep a bounded amount. Killing the worker means SIGKILL to its pidfd: the worker is init of
its own pid namespace, so every process it started dies with it, and a pidfd never reaches a
recycled pid.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from corral.errors import WorkerCrashed, WorkerError, WorkerProtocolError
from corral.sandbox._descriptors import Descriptors, ancillary_space, received, rights
from corral.sandbox._protocol import Done, RunRequest, encode_message
from corral.sandbox._syscalls import as_fs_owner, write_all
from corral.sandbox.host._cgroups import SandboxCgroup
from corral.sandbox.host._reader import FrameBuffer, RunReader, expect_ready, ready_bound

__all__ = ["OutputSink", "Worker", "WorkerReport", "release"]

_READ_CHUNK = 1 << 16


class OutputSink(Protocol):
    def feed(self, data: bytes) -> None: ...


@dataclass(slots=True)
class WorkerReport:
    """What a worker said about a finished request, within the run's limits (the engine
    still validates names and digests)."""

    done: Done
    display: list[dict[str, Any]] = field(default_factory=list)
    contents: list[bytes] = field(default_factory=list)


def release(*handles: socket.socket | int | None) -> None:
    """Close sockets and descriptors, first waking any task still waiting on one of them:
    its number may be reused at once, and a waiter must not see someone else's file."""
    for handle in handles:
        if handle is None:
            continue
        with contextlib.suppress(anyio.NoEventLoopError):
            anyio.notify_closing(handle)
        if isinstance(handle, socket.socket):
            handle.close()
        else:
            with contextlib.suppress(OSError):
                os.close(handle)


class Worker:
    """A pre-isolated worker process; one-shot unless created for a session."""

    def __init__(
        self,
        pid: int,
        pidfd: int | None,
        sock: socket.socket,
        out_fd: int,
        err_fd: int,
        *,
        outer_id: int,
        signaller: Callable[[int], None] | None = None,
    ) -> None:
        self.pid = pid
        self.outer_id = outer_id
        """The host uid and gid this worker runs as (its own; files for it are written so)."""
        self._pidfd = pidfd
        self._signaller = signaller
        self._sock = sock
        self._out = out_fd
        self._err = err_fd
        self._frames = FrameBuffer()
        self._pending: tuple[RunReader, Callable[[], None]] | None = None
        """The reader of the request in flight, kept so an interrupted run can be settled."""
        self.inputs_fd: int | None = None
        self.cgroup: SandboxCgroup | None = None
        """Its sandbox's cgroups (a session interpreter shares its holder's), when in force."""
        self.killed = False
        self.closed = False
        for fd in (out_fd, err_fd):
            os.set_blocking(fd, False)
        sock.setblocking(False)

    async def _receive(self) -> bool:
        """Read what the socket holds into the frame buffer; False once it is closed."""
        while True:
            try:
                data = self._sock.recv(_READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise WorkerCrashed(f"its socket failed: {exc}") from exc
            if not data:
                return False
            self._frames.feed(data)
            return True

    async def wait_ready(self) -> None:
        """Wait for the worker to finish isolating itself; keep the inputs descriptor it sends.

        Raises:
            WorkerCrashed: it died during set-up; the message carries what it said.
            WorkerProtocolError: it said something other than ready.
        """
        while (frame := self._frames.next(ready_bound)) is None:
            try:
                data, ancdata, _flags, _addr = self._sock.recvmsg(_READ_CHUNK, ancillary_space(1))
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise WorkerCrashed(f"its socket failed: {exc}") from exc
            with Descriptors(received(ancdata)) as fds:
                if fds and self.inputs_fd is None:  # only the first, as the worker sends it
                    self.inputs_fd = fds.take_first()
            if not data:
                raise WorkerCrashed(await self._setup_failure())
            self._frames.feed(data)
        expect_ready(*frame)

    async def _setup_failure(self) -> str:
        with anyio.move_on_after(1):
            await anyio.wait_readable(self._err)
        try:
            said = os.read(self._err, 4096).decode(errors="replace").strip()
        except OSError:
            said = ""
        base = "the worker exited before it was ready"
        return f"{base}: {said}" if said else base

    async def write_inputs(self, files: list[tuple[str, bytes]], *, uid: int, gid: int) -> None:
        """Create input files through the descriptor the worker handed over (in a thread:
        they may be megabytes, and the event loop must not wait on the disk).

        They are created as the worker's outer ``uid``/``gid`` (its tmpfs has no mapping for
        anyone else); the worker still cannot change them, because it sees them only through
        a read-only bind.
        """
        inputs_fd = self.inputs_fd
        if inputs_fd is None:
            raise WorkerProtocolError("this worker takes no inputs")

        def write() -> None:
            for name, data in files:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o444,
                    dir_fd=inputs_fd,
                )
                try:
                    write_all(fd, data)
                finally:
                    os.close(fd)

        await anyio.to_thread.run_sync(as_fs_owner, uid, gid, write)

    async def send(self, data: bytes) -> None:
        """Write ``data`` (whole frames) to the protocol socket.

        Raises:
            WorkerCrashed: it stopped reading.
        """
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            except OSError as exc:
                raise WorkerCrashed(f"it stopped reading: {exc}") from exc
            view = view[sent:]

    async def send_with(self, frame: bytes, fds: list[int]) -> None:
        """Write one frame with ``fds`` passed along (the receiver gets them with its first
        byte); the caller still closes its own copies.

        Raises:
            WorkerCrashed: it stopped reading (half a frame may have gone).
        """
        while True:
            try:
                sent = self._sock.sendmsg([frame], rights(fds))
                break
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
            except OSError as exc:
                raise WorkerCrashed(f"it stopped reading: {exc}") from exc
        if sent < len(frame):
            await self.send(frame[sent:])

    async def read_control(self) -> bytes:
        """The payload of the next frame that carries no output (``ready_bound``): a case
        server's answer, say; checked for size before it is read whole.

        Raises:
            WorkerCrashed: it closed the socket first.
            WorkerProtocolError: the frame is too large or of the wrong kind.
        """
        while (frame := self._frames.next(ready_bound)) is None:
            if not await self._receive():
                raise WorkerCrashed("it exited")
        return frame[1]

    async def _pump(self, fd: int, sink: OutputSink) -> None:
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not data:
                return
            sink.feed(data)

    def _drain(self, fd: int, sink: OutputSink) -> None:
        while not self.closed:
            try:
                data = os.read(fd, _READ_CHUNK)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            sink.feed(data)

    async def execute(
        self,
        request: RunRequest,
        stdout: OutputSink,
        stderr: OutputSink,
        on_started: Callable[[], None],
        on_display: Callable[[dict[str, Any]], None] = lambda _: None,
    ) -> WorkerReport:
        """Send one request and return the worker's report; output streams into the sinks
        and display bundles to ``on_display`` as they arrive.

        Raises:
            WorkerCrashed: the worker died or closed its socket before reporting.
            WorkerProtocolError: it sent something malformed, out of order or over the
                run's limits; nothing more is read from it.
        """

        async def exchange() -> WorkerReport:
            await self.send(encode_message(request))
            self._pending = (RunReader(request.limits, on_display), on_started)
            return await self._collect()

        return await self._pumping(exchange, stdout, stderr)

    async def settle(self, stdout: OutputSink, stderr: OutputSink) -> WorkerReport:
        """Read the rest of a request whose ``execute`` was cancelled after it was sent (an
        interrupted session run), checked as ``execute`` checks it; bound the wait outside.

        Raises:
            WorkerCrashed: the worker died or closed its socket before reporting.
            WorkerProtocolError: no request was in flight, or the rest broke the protocol.
        """
        if self._pending is None:
            raise WorkerProtocolError("the worker has no request in flight")
        return await self._pumping(self._collect, stdout, stderr)

    async def _pumping(
        self,
        exchange: Callable[[], Awaitable[WorkerReport]],
        stdout: OutputSink,
        stderr: OutputSink,
    ) -> WorkerReport:
        report: WorkerReport | None = None
        failure: WorkerError | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump, self._out, stdout)
            tg.start_soon(self._pump, self._err, stderr)
            try:
                report = await exchange()
            except WorkerError as exc:  # raised here, not from the group, to stay unwrapped
                self._pending = None
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        self._drain(self._out, stdout)
        self._drain(self._err, stderr)
        if failure is not None:
            raise failure
        assert report is not None
        return report

    async def _collect(self) -> WorkerReport:
        assert self._pending is not None
        reader = self._pending[0]
        while not reader.finished:
            await self._step()
        self._pending = None
        assert reader.done is not None
        return WorkerReport(reader.done, reader.display, reader.contents)

    async def _step(self) -> None:
        """Take the in-flight request's next frame, reading the socket if none is buffered."""
        assert self._pending is not None
        reader, on_started = self._pending
        frame = self._frames.next(reader.bound)
        if frame is None:
            if not await self._receive():
                raise WorkerCrashed("it exited before it answered")
            return
        was_started = reader.started
        reader.accept(*frame)
        if reader.started and not was_started:
            on_started()

    async def wait_started(self) -> None:
        """Read an in-flight request's frames until its code has started (a session's
        interrupt is meant for a run that began); bound the wait outside.

        Raises:
            WorkerCrashed: the worker died or closed its socket first.
            WorkerProtocolError: no request was in flight, or a frame broke the protocol.
        """
        if self._pending is None:
            raise WorkerProtocolError("the worker has no request in flight")
        reader = self._pending[0]
        while not (reader.started or reader.finished):
            await self._step()

    def drain(self, stdout: OutputSink, stderr: OutputSink) -> None:
        """Collect whatever output is already buffered (after a kill, say)."""
        self._drain(self._out, stdout)
        self._drain(self._err, stderr)

    async def wait_readable(self) -> None:
        """Return once the worker has written to its protocol socket (or closed it)."""
        if not self.closed:
            await anyio.wait_readable(self._sock)

    @property
    def pidfd(self) -> int | None:
        """Its pidfd (None for a session's interpreter or a case: their holder or server has
        the process); valid while the worker is open."""
        return None if self.closed else self._pidfd

    def interrupt(self) -> None:
        self._signal(signal.SIGINT)

    def kill(self) -> None:
        if self.killed and self._pidfd is not None:
            return  # a SIGKILL by pidfd cannot be caught or lost: the first one does it
        self.killed = True
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        if self.closed:
            return
        if self._pidfd is None:
            if self._signaller is not None:
                self._signaller(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signum)

    def exited(self) -> bool:
        """Whether the worker's process has ended (known only where it has a pidfd)."""
        if self.closed:
            return True
        if self._pidfd is None:
            return False
        # poll, not select: an engine serving many connections holds descriptors past
        # select's FD_SETSIZE.
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def close(self) -> None:
        """Kill the worker (if alive) and release every fd; idempotent."""
        if self.closed:
            return
        self.kill()
        self.closed = True
        release(self._sock, self._out, self._err, self._pidfd, self.inputs_fd)
        if self.cgroup is not None:
            self.cgroup.close()
