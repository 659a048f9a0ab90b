"""The engine's handle on one worker: its protocol socket, output pipes and pidfd.

Stdout and stderr arrive on pipes the worker holds as fds 1 and 2, so output from C code and
subprocesses is captured too; the engine consumes them while the code runs, into sinks that
keep a bounded amount. Killing the worker means SIGKILL to its pidfd: the worker is init of
its own pid namespace, so every process it started dies with it, and a pidfd never reaches a
recycled pid.
"""

from __future__ import annotations

import array
import contextlib
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from corral.errors import WorkerCrashed, WorkerError, WorkerProtocolError
from corral.sandbox._protocol import MAX_CONTROL_FRAME, FrameDecoder, encode_json
from corral.sandbox._syscalls import as_fs_owner

__all__ = ["OutputSink", "Worker", "WorkerReport"]

_READ_CHUNK = 1 << 16


class OutputSink(Protocol):
    def feed(self, data: bytes) -> None: ...


@dataclass(slots=True)
class WorkerReport:
    """What a worker said about a finished request (untrusted; the engine validates it)."""

    done: dict[str, Any]
    contents: list[bytes] = field(default_factory=list)


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
        max_file_bytes: int,
        signaller: Callable[[int], None] | None = None,
    ) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._signaller = signaller
        self._sock = sock
        self._out = out_fd
        self._err = err_fd
        self._decoder = FrameDecoder(max(MAX_CONTROL_FRAME, max_file_bytes))
        self._frames: list[tuple[str, Any]] = []
        self.inputs_fd: int | None = None
        self.killed = False
        self.closed = False
        for fd in (out_fd, err_fd):
            os.set_blocking(fd, False)
        sock.setblocking(False)

    async def _next_frame(self) -> tuple[str, Any]:
        while not self._frames:
            try:
                data = self._sock.recv(_READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise WorkerCrashed(f"worker {self.pid} socket failed: {exc}") from exc
            if not data:
                raise WorkerCrashed(f"worker {self.pid} exited before it answered")
            self._frames.extend(self._decoder.feed(data))
        return self._frames.pop(0)

    async def _next_json(self) -> dict[str, Any]:
        kind, message = await self._next_frame()
        if kind != "J":
            raise WorkerProtocolError("expected a JSON frame")
        assert isinstance(message, dict)
        return message

    async def wait_ready(self) -> None:
        """Wait for the worker to finish isolating itself; keep the inputs descriptor it sends.

        Raises:
            WorkerCrashed: it died during set-up; the message carries what it said.
        """
        while not self._frames:
            try:
                data, ancdata, _flags, _addr = self._sock.recvmsg(_READ_CHUNK, socket.CMSG_SPACE(4))
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise WorkerCrashed(f"worker {self.pid} socket failed: {exc}") from exc
            for level, kind, raw in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS and len(raw) >= 4:
                    fds = array.array("i")
                    fds.frombytes(raw[: len(raw) - len(raw) % 4])
                    for extra in fds[1:]:
                        os.close(extra)
                    if self.inputs_fd is None:
                        self.inputs_fd = fds[0]
                    else:
                        os.close(fds[0])
            if not data:
                raise WorkerCrashed(await self._setup_failure())
            self._frames.extend(self._decoder.feed(data))
        message = await self._next_json()
        if message.get("t") != "ready":
            raise WorkerProtocolError(f"expected ready, got {message.get('t')!r}")

    async def _setup_failure(self) -> str:
        with anyio.move_on_after(1):
            await anyio.wait_readable(self._err)
        try:
            said = os.read(self._err, 4096).decode(errors="replace").strip()
        except OSError:
            said = ""
        base = f"worker {self.pid} exited before it was ready"
        return f"{base}: {said}" if said else base

    def write_inputs(self, files: list[tuple[str, bytes]], *, uid: int, gid: int) -> None:
        """Create input files through the descriptor the worker handed over.

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
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)

        as_fs_owner(uid, gid, write)

    async def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            except OSError as exc:
                raise WorkerCrashed(f"worker {self.pid} stopped reading: {exc}") from exc
            view = view[sent:]

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
        request: dict[str, Any],
        stdout: OutputSink,
        stderr: OutputSink,
        on_started: Callable[[], None],
    ) -> WorkerReport:
        """Send one request and return the worker's report; output streams into the sinks.

        Raises:
            WorkerCrashed: the worker died or closed its socket before reporting.
            WorkerProtocolError: it sent something malformed or oversized.
        """
        report: WorkerReport | None = None
        failure: WorkerError | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump, self._out, stdout)
            tg.start_soon(self._pump, self._err, stderr)
            try:
                report = await self._exchange(request, on_started)
            except WorkerError as exc:  # raised here, not from the group, to stay unwrapped
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        self._drain(self._out, stdout)
        self._drain(self._err, stderr)
        if failure is not None:
            raise failure
        assert report is not None
        return report

    async def _exchange(
        self, request: dict[str, Any], on_started: Callable[[], None]
    ) -> WorkerReport:
        await self._send(encode_json(request))
        started = await self._next_json()
        if started.get("t") != "started":
            raise WorkerProtocolError("expected started")
        on_started()
        done = await self._next_json()
        if done.get("t") != "done":
            raise WorkerProtocolError("expected done")
        files = done.get("files")
        wanted = 0
        if isinstance(files, list):
            wanted = sum(1 for f in files if isinstance(f, dict) and f.get("content"))
        contents: list[bytes] = []
        for _ in range(wanted):
            kind, blob = await self._next_frame()
            if kind != "B":
                raise WorkerProtocolError("expected file content")
            contents.append(blob)
        return WorkerReport(done, contents)

    def drain(self, stdout: OutputSink, stderr: OutputSink) -> None:
        """Collect whatever output is already buffered (after a kill, say)."""
        self._drain(self._out, stdout)
        self._drain(self._err, stderr)

    async def wait_readable(self) -> None:
        """Return once the worker has written to its protocol socket (or closed it)."""
        if not self.closed:
            await anyio.wait_readable(self._sock)

    def interrupt(self) -> None:
        self._signal(signal.SIGINT)

    def kill(self) -> None:
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

    def close(self) -> None:
        """Kill the worker (if alive) and release every fd; idempotent."""
        if self.closed:
            return
        self.kill()
        self.closed = True
        self._sock.close()
        for fd in (self._out, self._err, self._pidfd, self.inputs_fd):
            if fd is None:
                continue
            with contextlib.suppress(OSError):
                os.close(fd)
