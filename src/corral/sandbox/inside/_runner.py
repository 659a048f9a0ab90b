"""The worker's main loop: warm up, lock down, announce readiness, run requests, report.

Runs inside the sandbox, in the same process as user code, so nothing here is trusted by the
engine: it only saves the engine work (rendering display, hashing files) and the engine checks
every frame it receives. One-shot workers serve a single request and exit; session
interpreters loop until their socket closes.
"""

from __future__ import annotations

import array
import builtins
import contextlib
import dataclasses
import functools
import importlib
import io
import os
import resource
import socket
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from corral.sandbox._case_protocol import decode_cases_request
from corral.sandbox._control_protocol import StaticLimits
from corral.sandbox._protocol import (
    HEADER,
    MAX_REQUEST,
    Done,
    ErrorReport,
    InputSpec,
    Ready,
    RunLimits,
    RunRequest,
    Started,
    Usage,
    decode_request,
    encode_bytes,
    encode_message,
    read_frame_sync,
    write_frames_sync,
)
from corral.sandbox.inside import _cases, _feed, _interrupt, _isolate
from corral.sandbox.inside._cell import (
    Cell,
    CellOutput,
    Display,
    execute_cell,
    no_input,
    prepare_script,
)
from corral.sandbox.inside._fitting import DisplaySender, clip, fit_result
from corral.sandbox.inside._walk import collect_files
from corral.sandbox.inside._workdir import (
    Snapshot,
    changed_since,
    link_sources,
    make_usable,
    snapshot,
)

__all__ = [
    "DISPLAY",
    "PROTOCOL_FD",
    "serve",
    "warm_up_zygote",
    "worker_main",
]

PROTOCOL_FD = 3
_LINGER_READ = 4096  # bytes read at a time while waiting for the engine to hang up
DISPLAY = Display()
SENDER = DisplaySender()
DISPLAY.sink = SENDER
_STARTED = encode_message(Started())


def _reseed() -> None:
    # ``random`` reseeds its global generator from the OS in every forked child by itself.
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # Full MT19937 entropy from the OS, at half the cost of numpy.random.seed().
        key = numpy.frombuffer(os.urandom(624 * 4), dtype=numpy.uint32)
        numpy.random.set_state(("MT19937", key, 624))


def _rebind_stdio() -> None:
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")


def _inputs(items: tuple[InputSpec, ...]) -> tuple[dict[str, str], dict[str, Any]]:
    files: dict[str, str] = {}
    assets: dict[str, Any] = {}
    for item in items:
        text_path = f"/inputs/{item.id}.txt"
        files[item.id] = text_path
        assets[item.id] = {
            "text": text_path,
            "original": f"/inputs/{item.id}.orig" if item.original else None,
            "media_type": item.media_type,
            "name": item.name or None,
        }
    return files, assets


def _usage() -> Usage:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return Usage(cpu * 1000.0, max(own.ru_maxrss, kids.ru_maxrss))


def _report(
    limits: RunLimits,
    output: CellOutput,
    cwd: str,
    session: bool,
    before: Snapshot | None = None,
) -> list[bytes]:
    collected = None
    if not session or before is not None:
        keep = None if before is None else changed_since(before)
        collected = collect_files(cwd, limits.max_files, limits.max_file_bytes, keep)
    result, plain = None, None
    if output.result != "":
        assert isinstance(output.result, dict)
        result, plain = fit_result(
            output.result, limits.output_chars, limits.display_bytes, SENDER.nodes_left
        )
    error = None
    if output.error is not None:
        ceiling = limits.output_chars
        error = ErrorReport(
            clip(output.error["type"], ceiling),
            clip(output.error["message"], ceiling),
            clip(output.error["traceback"], ceiling),
        )
    done = Done(
        result=result,
        plain=plain,
        error=error,
        display_omitted=SENDER.omitted,
        files=() if collected is None else tuple(collected.files),
        files_omitted=0 if collected is None else collected.omitted,
        exit_code=output.exit_code,
        usage=_usage(),
    )
    contents = () if collected is None else collected.contents
    return [encode_message(done), *(encode_bytes(c) for c in contents)]


def _on_error(text: str) -> None:
    sys.stderr.write(text)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


_WRITE = threading.Lock()  # a display() from a thread of the code must not split a frame


def _write(*frames: bytes) -> None:
    with _WRITE:
        write_frames_sync(PROTOCOL_FD, *frames)


def _interruptible(code: str, namespace: dict[str, Any], filename: str) -> CellOutput:
    """A session's cell, which the engine may interrupt (``_interrupt``)."""
    try:
        _interrupt.arm()
        return execute_cell(code, namespace, DISPLAY, _on_error, filename)
    except KeyboardInterrupt:
        # It landed after the cell caught everything else (rendering figures, returning).
        output = CellOutput()
        output.error = {"type": "KeyboardInterrupt", "message": "", "traceback": ""}
        return output
    finally:
        _interrupt.install()  # disarmed, and no handler of the code's runs between requests


def _see_installed_packages() -> None:
    """Packages pip installed since the last cell are importable: the import system
    remembers a missing folder on ``sys.path`` as nothing to look in."""
    site = _isolate.PACKAGES_SITE
    if sys.path_importer_cache.get(site, ()) is None and os.path.isdir(site):
        del sys.path_importer_cache[site]


def _serve_one(
    request: RunRequest,
    namespace: dict[str, Any],
    cwd: str,
    session: bool,
    cell: Cell | None = None,
    prelude: Callable[[], None] | None = None,
) -> None:
    limits = request.limits
    _isolate.bound_run_to(limits, session=session)
    make_usable(cwd)
    os.chdir(cwd)
    _see_installed_packages()
    if not session:
        _feed.feed(request.stdin, request.files, cwd)
    namespace["input_files"], namespace["input_assets"] = _inputs(request.inputs)
    link_sources(request.inputs, cwd)
    filename = prepare_script(namespace, request.argv, cwd)
    # A template's files are in every sandbox of it: a run reports what it changed, not them.
    before = snapshot(cwd) if session or _isolate.has_template() else None
    if (workdir := _isolate.template_workdir(cwd)) is not None:
        with contextlib.suppress(OSError):  # a folder the code removed: stay in the home
            os.chdir(workdir)
    if session and request.cwd:
        with contextlib.suppress(OSError):  # a folder the code removed: stay in the session's
            os.chdir(request.cwd)
    SENDER.reset(
        _write,
        max_items=limits.max_display,
        max_bytes=limits.display_bytes,
        ceiling=limits.output_chars,
    )
    _write(_STARTED)
    if session:
        output = _interruptible(request.code, namespace, filename)
    else:
        output = execute_cell(request.code, namespace, DISPLAY, _on_error, filename, cell, prelude)
    _flush()
    make_usable(cwd)
    frames = _report(limits, output, cwd, session, before)
    with _WRITE:
        # Display from a thread the code left running has no run to go to until the next one.
        SENDER.write = None
        write_frames_sync(PROTOCOL_FD, *frames)


_WARM_LIMITS = RunLimits(
    memory_bytes=1,
    cpu_seconds=1,
    pids=1,
    file_bytes=1,
    open_files=1,
    max_files=1,
    max_file_bytes=1,
    max_display=1,
    display_bytes=1 << 20,
    output_chars=64,
)


def _warm(code: str, scratch: dict[str, Any], cwd: str, session: bool) -> None:
    SENDER.reset(None, max_items=1, max_bytes=1 << 20, ceiling=64)
    output = execute_cell(code, scratch, DISPLAY, _on_error)
    _report(_WARM_LIMITS, output, cwd, session)
    SENDER.reset(None, max_items=1, max_bytes=1 << 20, ceiling=64)


def warm_up_zygote() -> None:
    """Run the cell and report path once in the zygote, before it freezes its heap.

    Lazy initialisation (IPython's formatters, the compiler, the encoder) then happens once,
    in memory every worker shares, instead of in each worker's private copy.
    """
    scratch: dict[str, Any] = {"__builtins__": builtins}
    for code in ("_ = 1\n_", "print(end='')\n'text'", "[1, 2.5, None]", "display(1)"):
        _warm(code, scratch, "/", session=True)
    decode_request(encode_message(RunRequest(code="", limits=_WARM_LIMITS))[HEADER.size :])


def _warm_up(cwd: str) -> None:
    """Touch the run path once so its copy-on-write faults happen before a request does:
    the request's decoding and the steps before the code that change nothing here (the
    limits, which can only go down, are left for the request)."""
    frame = encode_message(RunRequest(code="None", limits=_WARM_LIMITS))[HEADER.size :]
    decode_cases_request(frame)  # a one-shot worker's request is tried as cases first
    request = decode_request(frame)
    scratch: dict[str, Any] = {"__builtins__": builtins}
    make_usable(cwd)
    _see_installed_packages()
    _feed.feed(None, (), cwd)
    scratch["input_files"], scratch["input_assets"] = _inputs(request.inputs)
    link_sources(request.inputs, cwd)
    prepare_script(scratch, request.argv, cwd)
    _isolate.has_template()
    _isolate.template_workdir(cwd)
    _warm("None", scratch, cwd, session=False)


def _preload_template() -> None:
    """Import the template's preload list here, locked down inside the sandbox, while the
    worker waits in the pool: its code is the template builder's, never the zygote's to run.
    A module that fails to import is left for the code to meet (and see why)."""
    for module in _isolate.use_template_packages():
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def _send_ready(inputs_fd: int | None) -> None:
    frame = encode_message(Ready())
    sock = socket.socket(fileno=os.dup(PROTOCOL_FD))
    try:
        fds = [] if inputs_fd is None else [inputs_fd]
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        sent = sock.sendmsg([frame], ancillary if fds else [])
        if sent < len(frame):
            write_frames_sync(PROTOCOL_FD, frame[sent:])
    finally:
        sock.close()


def serve(
    *, cwd: str, session: bool, seccomp_bpf: bytes, static: StaticLimits, inputs_fd: int | None
) -> None:
    """Prepare a fresh interpreter, lock it down, and answer requests on the protocol fd."""
    _reseed()
    _rebind_stdio()
    builtins.input = no_input
    if _isolate.PACKAGES_SITE not in sys.path:
        sys.path.insert(0, _isolate.PACKAGES_SITE)  # as PYTHONPATH puts it for every other Python
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    namespace["__builtins__"] = builtins
    _warm_up(cwd)
    _isolate.lock_down(
        seccomp_bpf=seccomp_bpf,
        pids=static.pids,
        file_bytes=static.file_bytes,
        open_files=static.open_files,
    )
    _preload_template()
    if session:
        _interrupt.install()
    _send_ready(inputs_fd)
    if inputs_fd is not None:
        os.close(inputs_fd)
    while True:
        try:
            frame = read_frame_sync(PROTOCOL_FD, MAX_REQUEST)
            if session:
                _interrupt.begin()
        except EOFError:
            return
        batch = None if session else decode_cases_request(frame)
        if batch is not None:
            _cases.serve_cases(
                batch, namespace, functools.partial(_run_case, batch.code, namespace, cwd), cwd
            )
            return
        _serve_one(decode_request(frame), namespace, cwd, session)
        if not session:
            _linger()
            return


def _linger() -> None:
    """Stay until the engine closes the socket: it reads the sandbox's cgroup (what the run
    cost, whether the kernel killed any of it) after the report, and the cgroup goes with
    this process's reaping."""
    with contextlib.suppress(OSError):
        while os.read(PROTOCOL_FD, _LINGER_READ):
            pass


def _run_case(
    code: str,
    namespace: dict[str, Any],
    cwd: str,
    cell: Cell | None,
    prelude: Callable[[], None] | None,
) -> None:
    """In a case server's child: serve the case's request as a fresh one-shot worker would,
    with the code the server compiled (the request carries none)."""
    _reseed()
    request = decode_request(read_frame_sync(PROTOCOL_FD, MAX_REQUEST))
    _serve_one(dataclasses.replace(request, code=code), namespace, cwd, False, cell, prelude)


def worker_main(
    *,
    template: str,
    staged: list[tuple[str, str]],
    seccomp_bpf: bytes,
    static: StaticLimits,
) -> None:
    """Enter the sandbox in a freshly cloned one-shot worker and serve its one request."""
    cwd, inputs_fd = _isolate.enter(
        template=template,
        staged=staged,
        work_bytes=static.work_bytes,
    )
    serve(cwd=cwd, session=False, seccomp_bpf=seccomp_bpf, static=static, inputs_fd=inputs_fd)
