"""An in-process stand-in for the sandbox, on the protocol seam (test-only, no isolation).

``FakeZygote`` replaces ``corral.sandbox.Zygote`` behind the engine's worker supply. Each
``spawn`` returns a real ``corral.sandbox.Worker`` whose socket and pipes lead to a task in
the same event loop that speaks the typed protocol as the runner does: ``Ready``, then per
request ``Started``, ``Display`` bundles, a fitted ``Done``. What the "code" does is a
``Handler``: the default runs the cell in-process (real cell semantics, no isolation, so only
for trusted test code); a test may script output, sleeps (under trio's ``MockClock`` they take
no real time), hangs and crashes instead. The engine side (reader, limits, fitting, scheduler,
deadlines, streaming) is the real one. Sessions are not faked: their tests stay real.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import pytest

import corral.engine._supply
from corral.errors import ZygoteUnavailable
from corral.sandbox import ErrorReport, Holder, RunRequest, Worker
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

__all__ = ["FakeIO", "FakeReply", "FakeZygote", "Handler", "fake_sandbox", "run_cell"]

_PIDS = itertools.count(4_000_000)  # above any real pid, so no test signals a real process


@dataclass(frozen=True, slots=True)
class FakeReply:
    """What the fake code ended with: a MIME bundle for its trailing expression, or an error."""

    result: dict[str, Any] | None = None
    error: ErrorReport | None = None


class FakeIO:
    """What a handler may do while it "runs": write output and publish display bundles."""

    def __init__(self, out_fd: int, err_fd: int, sock: socket.socket, request: RunRequest) -> None:
        self._out, self._err, self._sock = out_fd, err_fd, sock
        self.request = request
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
        cell = execute_cell(request.code, {"__name__": "__main__"}, display, on_error)
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

    def __init__(self, *, preload: tuple[str, ...] = (), static: Any = None) -> None:
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
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        theirs.setblocking(False)
        scope = anyio.CancelScope()
        interrupted = anyio.Event()

        def signaller(signum: int) -> None:
            if signum == signal.SIGINT:
                interrupted.set()
            else:
                scope.cancel()

        self.spawned += 1
        worker = Worker(next(_PIDS), None, ours, out_r, err_r, signaller=signaller)
        self._tg.start_soon(self._serve, scope, interrupted, theirs, out_w, err_w)
        return worker

    async def _serve(
        self,
        scope: anyio.CancelScope,
        interrupted: anyio.Event,
        sock: socket.socket,
        out_w: int,
        err_w: int,
    ) -> None:
        try:
            with scope:
                await _write_all(sock.fileno(), encode_message(Ready()))
                request = decode_request(await _read_frame(sock))
                await _write_all(sock.fileno(), encode_message(Started()))
                fake = FakeIO(out_w, err_w, sock, request)
                reply = await _until_interrupted(type(self).handler(request, fake), interrupted)
                await _write_all(sock.fileno(), _done(request, reply, fake.sender))
        except (OSError, EOFError):
            pass  # the engine closed its end: the "process" is gone
        finally:
            sock.close()
            os.close(out_w)
            os.close(err_w)

    async def spawn_holder(self, disk_bytes: int) -> Holder:
        raise ZygoteUnavailable("the fake sandbox has no sessions; session tests are real")

    def kill(self) -> None:
        self.dead.set()

    async def aclose(self) -> None:
        self.dead.set()


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
