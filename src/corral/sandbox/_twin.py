"""The in-process twin of the sandbox: the engine's seam, served without any isolation.

**It runs code in the engine's own process, with the engine's privileges. It is for tests and
development only; ``corral serve`` refuses an engine built on it.**

Like httpx's ``MockTransport``, it stands behind the same seam as the real thing
(``SandboxBackend``), so every layer above the sandbox runs for real on it: the engine's run
path, scheduler, deadlines, reader and fitting, sessions and their files, case servers and
repeats, and every front end. Each "worker" is a task in the engine's event loop that speaks
the worker protocol on real sockets and pipes (``Ready``, then ``Started``, ``Display``,
``Done``, file contents; a case server's ``CaseEnded``); what the code does is a
:data:`Handler`. The default, :func:`run_in_process` (``_twin_cell``), runs the cell with
the real cell semantics, in a folder of its own (a one-shot worker's, or the session's data
folder), with its stdin, files and inputs, its own ``__main__``, a worker's display wiring
and warning filters, and reports the files it made. A test may pass a handler that scripts
output, display, sleeps (no real time under trio's ``MockClock``), hangs, or crashes
(``TwinReply(crashed=True)``: the worker ends mid-run, as on ``os._exit``). Code run in
process cannot be interrupted: deadlines stop only handlers that wait.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import signal
import socket
import tempfile
import types
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from corral._uids import DEFAULT_UID_RANGE, UidRange
from corral.errors import IsolationError, WorkerCrashed, ZygoteUnavailable
from corral.sandbox._case_protocol import (
    CaseEnded,
    CaseStart,
    CaseStop,
    decode_cases_request,
    decode_server_command,
    encode_case_message,
)
from corral.sandbox._control_protocol import NO_FILES, Hello, SandboxFiles, StaticLimits
from corral.sandbox._descriptors import Descriptors, ancillary_space, received, rights
from corral.sandbox._protocol import (
    HEADER,
    Done,
    ErrorReport,
    Ready,
    RunRequest,
    Started,
    decode_request,
    encode_bytes,
    encode_message,
)
from corral.sandbox._twin_cell import (
    Handler,
    TwinIO,
    TwinReply,
    new_main,
    preload,
    run_in_process,
    write_all,
)
from corral.sandbox.host._worker import Worker
from corral.sandbox.inside._fitting import clip, fit_result
from corral.sandbox.inside._walk import collect_files
from corral.sandbox.inside._workdir import changed_since, snapshot

if TYPE_CHECKING:
    from corral.sandbox.host._cgroups import CgroupTree, SandboxCgroup
    from corral.sandbox.host._command import Command
    from corral.sandbox.host._doctor import DoctorReport

__all__ = ["InProcessBackend"]

TWIN_UID = DEFAULT_UID_RANGE.first + 1
"""The uid a twin's files are written as, as a real worker's are written as its host uid."""
_PIDS = itertools.count(4_000_000)  # above any real pid: nothing ever signals a real process
_READ = 1 << 16
_MAX_FDS = 4  # a case's three descriptors, and room to see a fourth as extra


class _Crashed(Exception):
    """A handler's ``TwinReply(crashed=True)``: the twin worker ends without a report."""


class _Stream:
    """The twin's end of a worker socket: whole frames in, descriptors kept as they come."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._buffer = bytearray()
        self.fds: list[int] = []

    async def frame(self) -> bytes:
        """The next frame's payload. Raises: EOFError once the engine has hung up."""
        while True:
            if len(self._buffer) >= HEADER.size:
                size = HEADER.unpack_from(self._buffer)[0]
                if len(self._buffer) >= HEADER.size + size:
                    payload = bytes(self._buffer[HEADER.size : HEADER.size + size])
                    del self._buffer[: HEADER.size + size]
                    return payload
            try:
                data, ancdata, _flags, _addr = self.sock.recvmsg(_READ, ancillary_space(_MAX_FDS))
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            self.fds.extend(received(ancdata))
            if not data:
                raise EOFError
            self._buffer += data


async def _serve_request(
    handler: Handler,
    request: RunRequest,
    stream: _Stream,
    out_w: int,
    err_w: int,
    main: types.ModuleType,
    cwd: str,
    inputs: str | None,
    *,
    session: bool,
    interrupted: anyio.Event,
) -> None:
    sock = stream.sock
    await write_all(sock.fileno(), encode_message(Started()))
    io_ = TwinIO(out_w, err_w, sock, request, main, cwd, inputs)
    before = snapshot(cwd) if session else None
    reply = await _until(handler(request, io_), interrupted)
    if reply.crashed:
        raise _Crashed
    limits = request.limits
    collected = collect_files(
        cwd,
        limits.max_files,
        limits.max_file_bytes,
        None if before is None else changed_since(before),
    )
    result, plain = None, None
    if reply.result is not None:
        result, plain = fit_result(
            reply.result, limits.output_chars, limits.display_bytes, io_.sender.nodes_left
        )
    error = reply.error
    if error is not None:
        ceiling = limits.output_chars
        error = ErrorReport(
            clip(error.type, ceiling), clip(error.message, ceiling), clip(error.traceback, ceiling)
        )
    done = Done(
        result=result,
        plain=plain,
        error=error,
        display_omitted=io_.sender.omitted,
        files=tuple(collected.files),
        files_omitted=collected.omitted,
        exit_code=reply.exit_code,
    )
    frames = [encode_message(done), *(encode_bytes(c) for c in collected.contents)]
    await write_all(sock.fileno(), b"".join(frames))


async def _until(work: Awaitable[TwinReply], interrupted: anyio.Event) -> TwinReply:
    reply: list[TwinReply] = []
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
    return TwinReply(error=ErrorReport("KeyboardInterrupt", "", "KeyboardInterrupt\n"))


@dataclass(slots=True)
class _Folder:
    """A twin worker's own folders: its working folder and where its inputs go."""

    root: str

    @classmethod
    def make(cls) -> _Folder:
        root = tempfile.mkdtemp(prefix="corral-twin-")
        for name in ("work", "inputs"):
            os.mkdir(os.path.join(root, name))
            os.chown(os.path.join(root, name), TWIN_UID, TWIN_UID)  # written as the sandbox's
        return cls(root)

    @property
    def work(self) -> str:
        return os.path.join(self.root, "work")

    @property
    def inputs(self) -> str:
        return os.path.join(self.root, "inputs")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _start_worker(tg: anyio.abc.TaskGroup, handler: Handler, session_folder: str | None) -> Worker:
    """A twin worker: one request (or a case server's cases) when ``session_folder`` is None,
    else a session's interpreter serving requests until it is killed."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    scope = anyio.CancelScope()
    interrupted = [anyio.Event()]
    folder = None if session_folder is not None else _Folder.make()

    def signaller(signum: int) -> None:
        if signum == signal.SIGINT:
            interrupted[0].set()
        else:
            scope.cancel()

    async def serve() -> None:
        main = new_main()
        stream = _Stream(theirs)
        cwd = folder.work if folder is not None else str(session_folder)
        inputs = None if folder is None else folder.inputs
        try:
            with scope:
                ready = encode_message(Ready())
                handed = [] if inputs is None else [os.open(inputs, os.O_RDONLY | os.O_DIRECTORY)]
                try:
                    theirs.sendmsg([ready], rights(handed))
                finally:
                    Descriptors(handed).close()
                while True:
                    payload = await stream.frame()
                    cases = None if session_folder is not None else decode_cases_request(payload)
                    if cases is not None:
                        await _serve_cases(handler, cases.code, stream, cwd, main)
                        return
                    interrupted[0] = anyio.Event()
                    await _serve_request(
                        handler, decode_request(payload), stream, out_w, err_w, main, cwd,
                        inputs, session=session_folder is not None, interrupted=interrupted[0],
                    )  # fmt: skip
                    if session_folder is None:
                        return
        except (OSError, EOFError, _Crashed):
            pass  # the engine closed its end, or the code crashed: the "process" is gone
        finally:
            Descriptors(stream.fds).close()
            theirs.close()
            os.close(out_w)
            os.close(err_w)
            if folder is not None:
                folder.remove()

    tg.start_soon(serve)
    return Worker(next(_PIDS), None, ours, out_r, err_r, outer_id=TWIN_UID, signaller=signaller)


async def _serve_cases(
    handler: Handler, code: str, stream: _Stream, cwd: str, main: types.ModuleType
) -> None:
    """A twin case server: each case a request on the descriptors ``CaseStart`` brings."""
    while True:
        command = decode_server_command(await stream.frame())
        fds, stream.fds = stream.fds, []
        with Descriptors(fds) as held:
            if not isinstance(command, CaseStart) or len(fds) != 3:
                if isinstance(command, CaseStop):
                    ended = CaseEnded(timed_out=False, clean=True)
                    await write_all(stream.sock.fileno(), encode_case_message(ended))
                continue
            case = _Stream(socket.socket(fileno=held.take(fds[0])))
            out_w, err_w = held.take(fds[1]), held.take(fds[2])
        for fd in (out_w, err_w):
            os.set_blocking(fd, False)
        try:
            request = decode_request(await case.frame())
            request = dataclasses.replace(request, code=code)
            await _serve_request(
                handler, request, case, out_w, err_w, _forked(main), cwd, None,
                session=False, interrupted=anyio.Event(),
            )  # fmt: skip
        except (OSError, EOFError, _Crashed):
            pass  # the case's process is gone; its server serves the next
        finally:
            case.sock.close()
            os.close(out_w)
            os.close(err_w)


def _forked(main: types.ModuleType) -> types.ModuleType:
    """A case's ``__main__``: the case server's, as a fork copies it."""
    case = new_main()
    case.__dict__.update(main.__dict__)
    return case


class InProcessHolder:
    """A twin session: a temporary data folder and an interpreter task per slot."""

    def __init__(self, tg: anyio.abc.TaskGroup, handler: Handler) -> None:
        self.pid = next(_PIDS)
        self._tg, self._handler = tg, handler
        self._dir = tempfile.mkdtemp(prefix="corral-twin-session-")
        os.chown(self._dir, TWIN_UID, TWIN_UID)  # the engine writes as the sandbox's uid
        self.outer_id = TWIN_UID
        self.cgroup: SandboxCgroup | None = None
        self._workers: dict[int, Worker] = {}
        self.closed = False

    @property
    def interpreter_alive(self) -> bool:
        return 0 in self._workers

    def running_interpreters(self) -> int:
        return len(self._workers)

    @property
    def pidfd(self) -> int | None:
        return None  # no process, no namespace: no network

    async def wait_ready(self) -> None:
        pass

    def open_data_dir(self) -> int:
        return os.open(self._dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    async def start_interpreter(self, slot: int = 0) -> Worker:
        if self.closed:
            raise ZygoteUnavailable("the session holder is closed")
        worker = self._workers[slot] = _start_worker(self._tg, self._handler, self._dir)
        try:
            await worker.wait_ready()
        except BaseException:  # cancelled as it started (its session closed): nobody has it
            worker.kill()
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
        raise WorkerCrashed("the in-process twin runs no commands (they need a real sandbox)")

    async def interrupt_interpreter(self, slot: int = 0) -> None:
        if slot in self._workers:
            self._workers[slot].interrupt()

    async def kill_interpreter(self, slot: int = 0) -> None:
        for killed in list(self._workers) if slot == 0 else [slot]:
            worker = self._workers.pop(killed, None)
            if worker is not None:
                worker.kill()

    def kill(self) -> None:
        for worker in self._workers.values():
            worker.kill()
        self._workers.clear()

    def close(self) -> None:
        if not self.closed:
            self.kill()
            self.closed = True
            shutil.rmtree(self._dir, ignore_errors=True)


class InProcessZygote:
    """The twin of ``corral.sandbox.Zygote``: it "spawns" tasks in the engine's loop."""

    def __init__(self, handler: Handler, preload: tuple[str, ...] = ()) -> None:
        self._handler = handler
        self._preload = preload
        self.dead = anyio.Event()
        self.hello: Hello | None = Hello(pid=0, python="in-process", versions={})
        self.spawned = 0
        self._pid: int | None = next(_PIDS)
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def pid(self) -> int | None:
        return self._pid

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        # In the loop's own thread, as a zygote starts before it serves: a worker thread
        # would let a mock clock jump while it imports.
        preload(self._preload)
        self._tg = task_group

    def _group(self) -> anyio.abc.TaskGroup:
        if self._tg is None or self.dead.is_set():
            raise ZygoteUnavailable("the in-process twin is not running")
        return self._tg

    async def spawn(self, *, work_bytes: int | None = None) -> Worker:
        worker = _start_worker(self._group(), self._handler, None)
        self.spawned += 1
        return worker

    async def spawn_ready(self, *, work_bytes: int | None = None) -> Worker:
        worker = await self.spawn(work_bytes=work_bytes)
        try:
            await worker.wait_ready()
        except BaseException:
            worker.close()
            raise
        return worker

    async def spawn_holder(
        self, disk_bytes: int, *, memory_bytes: int | None = None, group: str | None = None
    ) -> InProcessHolder:
        return InProcessHolder(self._group(), self._handler)

    def kill(self) -> None:
        self.dead.set()

    async def aclose(self) -> None:
        self.dead.set()


class InProcessBackend:
    """The sandbox's in-process twin (see the module's docstring): **no isolation at all**.

    Args:
        handler: what the "code" does with each request; the real cell semantics, run in
            this process, when None.
    """

    isolated = False

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler: Handler = handler or run_in_process
        self.zygotes: list[InProcessZygote] = []
        """Every zygote it made, for tests that count spawns."""

    def zygote(
        self,
        *,
        preload: tuple[str, ...],
        uids: UidRange,
        static: StaticLimits,
        memory_bytes: int,
        data_dir: str | None,
        prewarm: bool,
        cgroups: CgroupTree | None,
        files: SandboxFiles = NO_FILES,
    ) -> InProcessZygote:
        made = InProcessZygote(self.handler, preload)
        self.zygotes.append(made)
        return made

    def cgroup_tree(self, *, capacity: int, cpu_quota: float, parent: str) -> CgroupTree:
        raise IsolationError("the in-process twin has no cgroups: it isolates nothing")

    def doctor(self) -> DoctorReport:
        from corral.sandbox.host._doctor import DoctorReport, Feature

        return DoctorReport(
            (Feature("in-process twin", True, True, "no isolation: for tests only"),)
        )
