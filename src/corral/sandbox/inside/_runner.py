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
import hashlib
import io
import os
import random
import resource
import socket
import stat
import sys
import types
from collections.abc import Callable
from typing import Any, NoReturn

from corral.sandbox._protocol import encode_bytes, encode_json, read_frame_sync, write_frames_sync
from corral.sandbox.inside import _isolate
from corral.sandbox.inside._cell import Display, execute_cell

__all__ = [
    "DISPLAY",
    "PROTOCOL_FD",
    "StaticLimits",
    "run_then_exit",
    "serve",
    "warm_up_zygote",
    "worker_main",
]

PROTOCOL_FD = 3
_MAX_REQUEST = 64 * 1024 * 1024  # bytes; code is bounded far below this by the engine
DISPLAY = Display()

StaticLimits = dict[str, int]
"""work_bytes, pids, file_bytes, open_files: fixed when the worker is created."""


def _no_input(prompt: object = "") -> str:
    raise EOFError("input() is not available: corral runs code non-interactively")


def _reseed() -> None:
    random.seed()
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


def _inputs(items: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, Any]]:
    files: dict[str, str] = {}
    assets: dict[str, Any] = {}
    for item in items:
        ident = str(item["id"])
        text_path = f"/inputs/{ident}.txt"
        files[ident] = text_path
        assets[ident] = {
            "text": text_path,
            "original": f"/inputs/{ident}.orig" if item.get("original") else None,
            "media_type": item.get("media_type", "text/plain"),
        }
    return files, assets


def _collect_files(
    root: str, max_files: int, max_bytes: int
) -> tuple[list[dict[str, Any]], list[bytes], int]:
    found: list[tuple[str, str]] = []
    device = os.stat(root).st_dev
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        # Runtime binds (a checkout under /work, say) are other file systems: not user files.
        dirnames[:] = sorted(
            d for d in dirnames if os.lstat(os.path.join(dirpath, d)).st_dev == device
        )
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                found.append((os.path.relpath(full, root), full))
    infos: list[dict[str, Any]] = []
    contents: list[bytes] = []
    budget = max_bytes
    for rel, full in found[:max_files]:
        with open(full, "rb") as handle:
            data = handle.read()
        include = len(data) <= budget
        if include:
            budget -= len(data)
            contents.append(data)
        infos.append(
            {
                "path": rel,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "content": include,
            }
        )
    return infos, contents, max(0, len(found) - max_files)


def _usage() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return {"cpu_ms": cpu * 1000.0, "peak_rss_kb": max(own.ru_maxrss, kids.ru_maxrss)}


def _report(request: dict[str, Any], output: Any, cwd: str, session: bool) -> list[bytes]:
    limits = request["limits"]
    files: list[dict[str, Any]] = []
    contents: list[bytes] = []
    files_omitted = 0
    if not session:
        files, contents, files_omitted = _collect_files(
            cwd, int(limits["max_files"]), int(limits["max_file_bytes"])
        )
    done = {
        "t": "done",
        "result": output.result,
        "error": output.error,
        "display": DISPLAY.bundles,
        "display_omitted": DISPLAY.omitted,
        "files": files,
        "files_omitted": files_omitted,
        "usage": _usage(),
    }
    return [encode_json(done), *(encode_bytes(c) for c in contents)]


def _on_error(text: str) -> None:
    sys.stderr.write(text)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _serve_one(request: dict[str, Any], namespace: dict[str, Any], cwd: str, session: bool) -> None:
    limits = request["limits"]
    _isolate.bound_run(
        memory_bytes=int(limits["memory_bytes"]),
        cpu_seconds=int(limits["cpu_seconds"]),
        pids=int(limits["pids"]),
        file_bytes=int(limits["file_bytes"]),
        open_files=int(limits["open_files"]),
        session=session,
    )
    os.chdir(cwd)
    namespace["input_files"], namespace["input_assets"] = _inputs(request.get("inputs", []))
    DISPLAY.reset(int(limits["max_display"]), int(limits["display_bytes"]))
    write_frames_sync(PROTOCOL_FD, encode_json({"t": "started"}))
    output = execute_cell(str(request["code"]), namespace, DISPLAY, _on_error)
    _flush()
    write_frames_sync(PROTOCOL_FD, *_report(request, output, cwd, session))


def warm_up_zygote() -> None:
    """Run the cell and report path once in the zygote, before it freezes its heap.

    Lazy initialisation (IPython's formatters, the compiler, the encoder) then happens once,
    in memory every worker shares, instead of in each worker's private copy.
    """
    scratch: dict[str, Any] = {"__builtins__": builtins}
    for code in ("_ = 1\n_", "print(end='')\n'text'", "[1, 2.5, None]"):
        output = execute_cell(code, scratch, DISPLAY, _on_error)
        _report({"limits": {}}, output, "/", session=True)
    DISPLAY.reset(DISPLAY.max_items, DISPLAY.max_bytes)


def _warm_up(cwd: str) -> None:
    """Touch the run path once so its copy-on-write faults happen before a request does."""
    scratch: dict[str, Any] = {"__builtins__": builtins}
    output = execute_cell("None", scratch, DISPLAY, _on_error)
    _report({"limits": {"max_files": 1, "max_file_bytes": 1}}, output, cwd, session=False)
    DISPLAY.reset(DISPLAY.max_items, DISPLAY.max_bytes)


def _send_ready(inputs_fd: int | None) -> None:
    frame = encode_json({"t": "ready"})
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
    builtins.input = _no_input
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    namespace["__builtins__"] = builtins
    _warm_up(cwd)
    _isolate.lock_down(
        seccomp_bpf=seccomp_bpf,
        pids=static["pids"],
        file_bytes=static["file_bytes"],
        open_files=static["open_files"],
    )
    _send_ready(inputs_fd)
    if inputs_fd is not None:
        os.close(inputs_fd)
    while True:
        try:
            _, request = read_frame_sync(PROTOCOL_FD, _MAX_REQUEST)
        except EOFError:
            return
        _serve_one(request, namespace, cwd, session)
        if not session:
            return


def run_then_exit(what: str, body: Callable[[], object]) -> NoReturn:
    """Run ``body`` in a forked child, say on stderr why it failed if it did, and exit.

    Never returns: a child must not fall back into its parent's code.
    """
    status = 0
    try:
        body()
    except BaseException as exc:  # noqa: BLE001 - any failure ends the child, with a reason
        status = 70
        with contextlib.suppress(OSError):
            os.write(2, f"corral {what} failed: {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(status)


def worker_main(
    *,
    template: str,
    staged: list[tuple[str, str]],
    seccomp_bpf: bytes,
    outer_uid: int,
    outer_gid: int,
    static: StaticLimits,
) -> None:
    """Enter the sandbox in a freshly cloned one-shot worker and serve its one request."""
    cwd, inputs_fd = _isolate.enter(
        template=template,
        staged=staged,
        outer_uid=outer_uid,
        outer_gid=outer_gid,
        work_bytes=static["work_bytes"],
    )
    serve(cwd=cwd, session=False, seccomp_bpf=seccomp_bpf, static=static, inputs_fd=inputs_fd)
