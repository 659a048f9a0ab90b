"""The worker's main loop: announce readiness, take a request, seal, run, report.

Runs inside the sandbox, in the same process as user code, so nothing here is trusted by the
engine: it only saves the engine work (fitting display, hashing files) and the engine checks
every frame it receives. One-shot workers serve a single request and exit; session workers
loop until their socket closes.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import os
import random
import resource
import stat
import sys
import types
from typing import Any

from corral.sandbox import _isolate
from corral.sandbox._cell import Display, execute_cell
from corral.sandbox._protocol import encode_bytes, encode_json, read_frame_sync, write_frames_sync

__all__ = ["DISPLAY", "PROTOCOL_FD", "serve", "worker_main"]

PROTOCOL_FD = 3
_MAX_REQUEST = 512 * 1024 * 1024  # bytes; inputs arrive as frames of their own
DISPLAY = Display()


def _no_input(prompt: object = "") -> str:
    raise EOFError("input() is not available: corral runs code non-interactively")


def _reseed() -> None:
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _rebind_stdio() -> None:
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")


def _write_inputs(inputs: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, Any]]:
    files: dict[str, str] = {}
    assets: dict[str, Any] = {}
    for item in inputs:
        ident = str(item["id"])
        _, text = read_frame_sync(PROTOCOL_FD, _MAX_REQUEST)
        text_path = f"/inputs/{ident}.txt"
        with open(text_path, "wb") as out:
            out.write(text)
        original_path = None
        if item.get("original"):
            _, original = read_frame_sync(PROTOCOL_FD, _MAX_REQUEST)
            original_path = f"/inputs/{ident}.orig"
            with open(original_path, "wb") as out:
                out.write(original)
        files[ident] = text_path
        assets[ident] = {"text": text_path, "original": original_path,
                         "media_type": item.get("media_type", "text/plain")}
    return files, assets


def _collect_files(root: str, max_files: int, max_bytes: int) -> tuple[list[dict[str, Any]],
                                                                        list[bytes], int]:
    found: list[tuple[str, str]] = []
    device = os.stat(root).st_dev
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        # Runtime binds (a checkout under /work, say) are other file systems: not user files.
        dirnames[:] = sorted(d for d in dirnames
                             if os.lstat(os.path.join(dirpath, d)).st_dev == device)
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
        infos.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "content": include})
    return infos, contents, max(0, len(found) - max_files)


def _usage() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return {"cpu_ms": cpu * 1000.0, "peak_rss_kb": max(own.ru_maxrss, kids.ru_maxrss)}


def _serve_one(request: dict[str, Any], namespace: dict[str, Any], cwd: str,
               sealed: bool, seccomp_bpf: bytes, session: bool) -> None:
    limits = request["limits"]
    input_files, input_assets = _write_inputs(request.get("inputs", []))
    if not sealed:
        _isolate.seal(
            work_bytes=int(limits["work_bytes"]), memory_bytes=int(limits["memory_bytes"]),
            cpu_seconds=int(limits["cpu_seconds"]), pids=int(limits["pids"]),
            file_bytes=int(limits["file_bytes"]), open_files=int(limits["open_files"]),
            seccomp_bpf=seccomp_bpf, inputs_written=bool(input_files),
        )
    os.chdir(cwd)
    namespace["input_files"] = input_files
    namespace["input_assets"] = input_assets
    DISPLAY.reset(int(limits["max_display"]), int(limits["display_bytes"]))
    write_frames_sync(PROTOCOL_FD, encode_json({"t": "started"}))

    def on_error(text: str) -> None:
        sys.stderr.write(text)

    output = execute_cell(str(request["code"]), namespace, DISPLAY, on_error)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    files: list[dict[str, Any]] = []
    contents: list[bytes] = []
    files_omitted = 0
    if not session:
        files, contents, files_omitted = _collect_files(
            cwd, int(limits["max_files"]), int(limits["max_file_bytes"]))
    done = {
        "t": "done", "result": output.result, "error": output.error,
        "display": DISPLAY.bundles, "display_omitted": DISPLAY.omitted,
        "files": files, "files_omitted": files_omitted, "usage": _usage(),
    }
    write_frames_sync(PROTOCOL_FD, encode_json(done), *(encode_bytes(c) for c in contents))


def serve(*, cwd: str, session: bool, seccomp_bpf: bytes) -> None:
    """Prepare a fresh interpreter and answer requests on the protocol fd.

    One-shot workers answer one request; session interpreters answer until the socket closes.
    """
    _reseed()
    _rebind_stdio()
    builtins.input = _no_input
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    namespace["__builtins__"] = builtins
    write_frames_sync(PROTOCOL_FD, encode_json({"t": "ready"}))
    sealed = False
    while True:
        try:
            _, request = read_frame_sync(PROTOCOL_FD, _MAX_REQUEST)
        except EOFError:
            return
        _serve_one(request, namespace, cwd, sealed, seccomp_bpf, session)
        sealed = True
        if not session:
            return


def worker_main(*, template: str, staged: list[tuple[str, str]], seccomp_bpf: bytes,
                outer_uid: int, outer_gid: int) -> None:
    """Run in a freshly cloned one-shot worker; never returns."""
    status = 0
    try:
        cwd = _isolate.enter(template=template, staged=staged, outer_uid=outer_uid,
                             outer_gid=outer_gid)
        serve(cwd=cwd, session=False, seccomp_bpf=seccomp_bpf)
    except BaseException as exc:  # noqa: BLE001 - report any failure, then exit
        status = 70
        try:
            os.write(2, f"corral worker failed: {type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(status)
