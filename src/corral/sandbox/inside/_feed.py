"""Inside a one-shot worker: what a run is fed besides its code, its stdin and working files.

Runs in the sandbox, after lock-down and before user code, so it needs no privilege and trusts
nothing: the paths it writes are the run's own file systems. A run given stdin reads it from a
real fd 0 (``input()``, ``sys.stdin``, ``open(0)`` all see it, and EOF after it); a run given
none keeps the closed stdin the runner set up.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import io
import os
import sys

from corral.sandbox import _syscalls as sc

__all__ = ["feed", "place_files", "stdin_fd"]

_BUILTIN_INPUT = builtins.input
_PIPE_BYTES = 64 * 1024  # a fresh pipe's default capacity: stdin this small never blocks
_SPILL = "/tmp/.corral-stdin"  # noqa: S108 - the worker's own tmpfs, unlinked once open


def _pipe_with(data: bytes) -> int | None:
    """A pipe holding all of ``data``, read end returned; None if it would not fit."""
    read_end, write_end = os.pipe()
    try:
        flags = fcntl.fcntl(write_end, fcntl.F_GETFL)
        fcntl.fcntl(write_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        sc.write_all(write_end, data)
    except BlockingIOError:
        # The pipe is smaller than usual (the user's pipe quota is spent): use a file.
        os.close(read_end)
        return None
    finally:
        os.close(write_end)
    return read_end


def _file_with(data: bytes) -> int:
    fd = os.open(_SPILL, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.unlink(_SPILL)
    sc.write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def stdin_fd(data: bytes) -> int:
    """A descriptor to read ``data`` from, then EOF: a pipe that holds all of it, else an
    unlinked file of the worker's /tmp."""
    fd = _pipe_with(data) if len(data) <= _PIPE_BYTES else None
    return _file_with(data) if fd is None else fd


def _bind_stdin(data: bytes) -> None:
    fd = stdin_fd(data)
    os.dup2(fd, 0)
    os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    builtins.input = _BUILTIN_INPUT


def _place(path: str, data: bytes, cwd: str) -> None:
    full = os.path.normpath(os.path.join(cwd, path))
    parent = os.path.dirname(full)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        sc.write_all(fd, data)
    finally:
        os.close(fd)


def feed(stdin: bytes | None, files: tuple[tuple[str, bytes], ...], cwd: str) -> None:
    """Place ``files`` under ``cwd`` and bind ``stdin`` to fd 0 (when given)."""
    place_files(files, cwd)
    if stdin is not None:
        _bind_stdin(stdin)


def place_files(files: tuple[tuple[str, bytes], ...], cwd: str, stderr: int = 2) -> None:
    """Write ``files`` under ``cwd``.

    A file that cannot be written is reported on ``stderr`` (the run's), as a shell would,
    and the run goes on: the program then fails the way it would have without the file.
    """
    for path, data in files:
        try:
            _place(path, data, cwd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.write(stderr, f"corral: could not write {path}: {exc.strerror}\n".encode())
