"""An in-process stand-in for the sandbox, on the protocol seam (test-only, no isolation).

``FakeZygote`` replaces ``corral.sandbox.Zygote`` behind the engine's worker supply. Each
``spawn`` returns a real ``corral.sandbox.Worker`` whose socket and pipes lead to a task in
the same event loop that speaks the typed protocol as the runner does: ``Ready``, then per
request ``Started``, ``Display`` bundles, a fitted ``Done``. What the "code" does is a
``Handler``: the default runs the cell in-process (real cell semantics, no isolation, so only
for trusted test code); a test may script output, sleeps (under trio's ``MockClock`` they take
no real time), hangs and crashes instead. The engine side (reader, limits, fitting, scheduler,
deadlines, streaming, sessions and their files) is the real one. ``FakeHolder`` gives a session
a temporary folder for its files and a fake interpreter whose namespace persists.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import signal
import socket
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import anyio
import anyio.abc
import pytest

import corral.engine._supply
from corral._uids import DEFAULT_UID_RANGE
from corral.errors import ZygoteUnavailable
from corral.sandbox import ErrorReport, Holder, RunRequest, Worker, Zygote
from corral.sandbox._protocol import (
    HEADER,
    Done,
    Ready,
    Started,
    decode_request,
    encode_message,
)
from corral.sandbox.inside._cell import Display, execute_cell
from corral.sandbox.inside._fitting import DisplaySender, clip, fit_result

__all__ = [
    "FakeHolder",
    "FakeIO",
    "FakeReply",
    "FakeZygote",
    "Handler",
    "fake_sandbox",
    "run_cell",
]

FAKE_OUTER_ID = DEFAULT_UID_RANGE.first + 1
"""The host uid a fake worker's files are written as, as a real one's would be."""
_PIDS = itertools.count(4_000_000)  # above any real pid, so no test signals a real process


@dataclass(frozen=True, slots=True)
class FakeReply:
    """What the fake code ended with: a MIME bundle for its trailing expression, or an error."""

    result: dict[str, Any] | None = None
    error: ErrorReport | None = None


class FakeIO:
    """What a handler may do while it "runs": write output and publish display bundles."""

    def __init__(
        self,
        out_fd: int,
        err_fd: int,
        sock: socket.socket,
        request: RunRequest,
        namespace: dict[str, Any],
        cwd: str | None,
    ) -> None:
        self._out, self._err, self._sock = out_fd, err_fd, sock
        self.request = request
        self.namespace = namespace
        """Persists between a session's runs, as an interpreter's globals do."""
        self.cwd = cwd
        """A session's data folder (what ``/mnt/data`` is in a real one); None for one-shot."""
        self._frames: list[bytes] = []
        limits = request.limits
        self.sender = DisplaySender()
        self.sender.reset(
            self._frames.append,
            max_items=limits.max_display,
            max_bytes=limits.display_bytes,
            ceiling=limits.output_chars,
        )

    async def stdout(self, text: str) -> None:
        await _write_all(self._out, text.encode())

    async def stderr(self, text: str) -> None:
        await _write_all(self._err, text.encode())

    async def display(self, bundle: dict[str, Any]) -> None:
        self.sender(bundle)
        await self.send_pending()

    async def send_pending(self) -> None:
        frames, self._frames[:] = list(self._frames), []
        for frame in frames:
            await _write_all(self._sock.fileno(), frame)


Handler = Callable[[RunRequest, FakeIO], Awaitable[FakeReply]]


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)


async def run_cell(request: RunRequest, fake: FakeIO) -> FakeReply:
    """The default handler: the real cell semantics, in this process, without isolation."""
    from IPython.core.formatters import DisplayFormatter

    display = Display()
    display.formatter = DisplayFormatter()
    display.sink = fake.sender
    out, err = io.StringIO(), io.StringIO()

    def on_error(text: str) -> None:
        err.write(text)

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cell = execute_cell(request.code, fake.namespace, display, on_error)
    await fake.stdout(out.getvalue())
    await fake.stderr(err.getvalue())
    await fake.send_pending()
    error = None
    if cell.error is not None:
        error = ErrorReport(cell.error["type"], cell.error["message"], cell.error["traceback"])
    return FakeReply(result=cell.result if isinstance(cell.result, dict) else None, error=error)


class FakeZygote:
    """Stands in for ``corral.sandbox.Zygote``: spawns in-process fake workers."""

    handler: Handler = run_cell

    def __init__(
        self, *, preload: tuple[str, ...] = (), uids: Any = None, static: Any = None
    ) -> None:
        self.preload = preload
        self.dead = anyio.Event()
        self.hello: dict[str, Any] = {"python": "fake", "versions": {}}
        self.pid: int | None = next(_PIDS)
        self.spawned = 0
        self._tg: anyio.abc.TaskGroup | None = None

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self._tg = task_group

    async def spawn(self, *, work_bytes: int | None = None) -> Worker:
        if self._tg is None or self.dead.is_set():
            raise ZygoteUnavailable("the fake zygote is not running")
        self.spawned += 1
        return _start(self._tg, type(self).handler, None)

    spawn_ready = Zygote.spawn_ready  # the real one: it only calls spawn and the worker

    async def spawn_holder(self, disk_bytes: int) -> Holder:
        if self._tg is None or self.dead.is_set():
            raise ZygoteUnavailable("the fake zygote is not running")
        return cast(Holder, FakeHolder(self._tg, type(self).handler))

    def kill(self) -> None:
        self.dead.set()

    async def aclose(self) -> None:
        self.dead.set()


def _start(tg: anyio.abc.TaskGroup, handler: Handler, cwd: str | None) -> Worker:
    """A fake worker process: one request when ``cwd`` is None, else a session interpreter
    that serves requests until it is killed."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    theirs.setblocking(False)
    scope = anyio.CancelScope()
    interrupted: list[anyio.Event] = [anyio.Event()]

    def signaller(signum: int) -> None:
        if signum == signal.SIGINT:
            interrupted[0].set()
        else:
            scope.cancel()

    async def serve() -> None:
        namespace: dict[str, Any] = {"__name__": "__main__"}
        try:
            with scope:
                await _write_all(theirs.fileno(), encode_message(Ready()))
                while True:
                    request = decode_request(await _read_frame(theirs))
                    await _write_all(theirs.fileno(), encode_message(Started()))
                    fake = FakeIO(out_w, err_w, theirs, request, namespace, cwd)
                    interrupted[0] = anyio.Event()
                    reply = await _until_interrupted(handler(request, fake), interrupted[0])
                    await _write_all(theirs.fileno(), _done(request, reply, fake.sender))
                    if cwd is None:
                        return
        except (OSError, EOFError):
            pass  # the engine closed its end: the "process" is gone
        finally:
            theirs.close()
            os.close(out_w)
            os.close(err_w)

    tg.start_soon(serve)
    return Worker(
        next(_PIDS), None, ours, out_r, err_r, outer_id=FAKE_OUTER_ID, signaller=signaller
    )


class FakeHolder:
    """Stands in for ``corral.sandbox.Holder``: a data folder and one fake interpreter."""

    def __init__(self, tg: anyio.abc.TaskGroup, handler: Handler) -> None:
        self.pid = next(_PIDS)
        self._tg, self._handler = tg, handler
        self._dir = tempfile.TemporaryDirectory(prefix="corral-fake-session-")
        self.outer_id = FAKE_OUTER_ID
        # The engine writes as the sandbox's uid.
        os.chown(self._dir.name, FAKE_OUTER_ID, FAKE_OUTER_ID)
        self._worker: Worker | None = None
        self.interpreter_alive = False
        self.closed = False

    async def wait_ready(self) -> None:
        pass

    def open_data_dir(self) -> int:
        return os.open(self._dir.name, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    async def start_interpreter(self) -> Worker:
        if self.closed:
            raise ZygoteUnavailable("the session holder is closed")
        self._worker = _start(self._tg, self._handler, self._dir.name)
        self.interpreter_alive = True
        await self._worker.wait_ready()
        return self._worker

    async def kill_interpreter(self) -> None:
        if self._worker is not None:
            self._worker.kill()
        self.interpreter_alive = False

    def kill(self) -> None:
        if self._worker is not None:
            self._worker.kill()
        self.interpreter_alive = False

    def close(self) -> None:
        if not self.closed:
            self.kill()
            self.closed = True
            self._dir.cleanup()


async def _until_interrupted(work: Awaitable[FakeReply], interrupted: anyio.Event) -> FakeReply:
    reply: list[FakeReply] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            reply.append(await work)
            tg.cancel_scope.cancel()

        async def interrupt() -> None:
            await interrupted.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(run)
        tg.start_soon(interrupt)
    if reply:
        return reply[0]
    return FakeReply(error=ErrorReport("KeyboardInterrupt", "", "KeyboardInterrupt\n"))


async def _read_frame(sock: socket.socket) -> bytes:
    data = bytearray()
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        try:
            chunk = sock.recv(1 << 16)
        except BlockingIOError:
            await anyio.wait_readable(sock)
            continue
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data[HEADER.size :])


def _done(request: RunRequest, reply: FakeReply, sender: DisplaySender) -> bytes:
    limits = request.limits
    result, plain = None, None
    if reply.result is not None:
        result, plain = fit_result(
            reply.result, limits.output_chars, limits.display_bytes, sender.nodes_left
        )
    error = reply.error
    if error is not None:
        ceiling = limits.output_chars
        error = ErrorReport(
            clip(error.type, ceiling), clip(error.message, ceiling), clip(error.traceback, ceiling)
        )
    done = Done(result=result, plain=plain, error=error, display_omitted=sender.omitted)
    return encode_message(done)


@contextlib.contextmanager
def fake_sandbox(monkeypatch: pytest.MonkeyPatch, handler: Handler = run_cell) -> Iterator[None]:
    """Within the block, engines started get fake zygotes whose code runs ``handler``."""
    patched = type("ScriptedZygote", (FakeZygote,), {"handler": staticmethod(handler)})
    with monkeypatch.context() as patch:
        patch.setattr(corral.engine._supply, "Zygote", patched)
        yield
