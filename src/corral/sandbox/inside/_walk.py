"""The files a one-shot run left in ``/work``: walked without recursion, with two descriptors.

Any depth works (a 2,500-level tree has paths past ``PATH_MAX``): the walk holds only the
current directory open, descends with ``openat`` and climbs back with ``..``, checking that
it arrived where it came from. It stops after ``MAX_WALK_ENTRIES`` entries, skips other file
systems (the runtime's binds) and symbolic links, and reports names escaped
(``_fitting.escape_name``). Contents are read and hashed in chunks, as the code's own uid.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.sandbox._protocol import MAX_REPORTED_PATH, FileReport
from corral.sandbox.inside._fitting import escape_name

__all__ = ["MAX_WALK_ENTRIES", "collect_files"]

MAX_WALK_ENTRIES = 100_000
"""Directory entries examined per run; past it the listing is cut (and the count with it)."""
_CHUNK = 1 << 20  # bytes read at a time while hashing
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(slots=True)
class _Level:
    ident: tuple[int, int]
    prefix: str
    subdirs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Collected:
    files: list[FileReport] = field(default_factory=list)
    contents: list[bytes] = field(default_factory=list)
    omitted: int = 0


def _read(dir_fd: int, name: str, budget: int) -> tuple[int, str, bytes | None]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        digest = hashlib.sha256()
        kept: list[bytes] = []
        size = 0
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if size <= budget:
                kept.append(chunk)
        return size, digest.hexdigest(), b"".join(kept) if size <= budget else None
    finally:
        os.close(fd)


Keep = Callable[[str, os.stat_result], bool]
"""Whether a file (escaped path, lstat) belongs in the report; a session keeps what changed."""


def _scan(
    fd: int, level: _Level, out: Collected, max_files: int, budget: list[int], keep: Keep | None
) -> int:
    """Report the regular files of one directory; queue its subdirectories. Returns entries."""
    files: list[str] = []
    seen = 0
    with os.scandir(fd) as entries:
        for entry in entries:
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                level.subdirs.append(entry.name)
            elif entry.is_file(follow_symlinks=False):
                files.append(entry.name)
            if seen >= MAX_WALK_ENTRIES:
                break
    level.subdirs.sort(reverse=True)  # popped from the end: visited in order
    for name in sorted(files):
        path = level.prefix + escape_name(name)
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:  # gone since it was listed
            continue
        if not stat.S_ISREG(info.st_mode) or (keep is not None and not keep(path, info)):
            continue
        if len(out.files) >= max_files or len(path) > MAX_REPORTED_PATH:
            out.omitted += 1
            continue
        try:
            size, digest, data = _read(fd, name, budget[0])
        except OSError:  # gone, or replaced by something else, since it was listed
            continue
        if data is not None:
            budget[0] -= len(data)
            out.contents.append(data)
        out.files.append(FileReport(path, size, digest, data is not None))
    return seen


def collect_files(root: str, max_files: int, max_bytes: int, keep: Keep | None = None) -> Collected:
    """The regular files under ``root`` in sorted, depth-first order, within the bounds (only
    those ``keep`` accepts, when given)."""
    out = Collected()
    budget = [max_bytes]
    fd = os.open(root, _DIR_FLAGS)
    try:
        top = os.fstat(fd)
        device = top.st_dev
        stack = [_Level((top.st_dev, top.st_ino), "")]
        entries = _scan(fd, stack[0], out, max_files, budget, keep)
        while stack and entries < MAX_WALK_ENTRIES:
            level = stack[-1]
            if level.subdirs:
                name = level.subdirs.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                info = os.fstat(child)
                if info.st_dev != device:  # a bind of the runtime, not the code's files
                    os.close(child)
                    continue
                os.close(fd)
                fd = child
                stack.append(
                    _Level((info.st_dev, info.st_ino), level.prefix + escape_name(name) + "/")
                )
                entries += _scan(fd, stack[-1], out, max_files, budget, keep)
                continue
            stack.pop()
            if not stack:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != stack[-1].ident:
                break  # the tree moved under us (a process the code left behind): stop here
    finally:
        os.close(fd)
    return out
