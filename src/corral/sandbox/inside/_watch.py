"""A folder watched inside the sandbox: E2B's ``files.watch_dir``, on inotify.

Run as ``python -m corral.sandbox.inside._watch [--recursive] PATH`` (a command of the
session, as the sandbox's user). Once its watches are in place it prints ``{"ready": true}``,
then one JSON line per event: ``{"name": <path relative to PATH>, "type": <envd's
EventType>}``, mapped as envd's fsnotify maps inotify's (a move in is a create, a move out a
rename). Recursive, it watches each folder made below PATH from then on too. A PATH that is
not a folder prints ``{"error": ..., "code": "not_found" | "invalid_argument"}`` and exits 1.
The engine believes none of this beyond its shape (``corral.e2b._watch``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import struct
import sys

__all__ = ["main"]

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_CLOEXEC = 0o2000000
_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW
)  # fmt: skip
_EVENT = struct.Struct("iIII")
_READ = 64 * 1024
_TYPES = (
    (IN_CREATE | IN_MOVED_TO, "EVENT_TYPE_CREATE"),
    (IN_MODIFY, "EVENT_TYPE_WRITE"),
    (IN_DELETE | IN_DELETE_SELF, "EVENT_TYPE_REMOVE"),
    (IN_MOVED_FROM | IN_MOVE_SELF, "EVENT_TYPE_RENAME"),
    (IN_ATTRIB, "EVENT_TYPE_CHMOD"),
)

_libc = ctypes.CDLL(None, use_errno=True)


def _say(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class _Watcher:
    def __init__(self, root: str, *, recursive: bool) -> None:
        self.root = root
        self.recursive = recursive
        self.fd = _libc.inotify_init1(IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths: dict[int, str] = {}

    def add(self, path: str) -> None:
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number), path)
        self.paths[wd] = path

    def add_tree(self, path: str) -> list[str]:
        """Watch ``path`` (and, recursive, every folder below it); the entries found below."""
        self.add(path)
        found: list[str] = []
        if not self.recursive:
            return found
        for folder, subfolders, files in os.walk(path):
            found += [os.path.join(folder, name) for name in (*subfolders, *files)]
            for name in subfolders:
                sub = os.path.join(folder, name)
                if not os.path.islink(sub):
                    with contextlib.suppress(OSError):  # gone, or not ours to read
                        self.add(sub)
        return found

    def events(self) -> None:
        while True:
            buffer = os.read(self.fd, _READ)
            offset = 0
            while offset < len(buffer):
                wd, mask, _cookie, length = _EVENT.unpack_from(buffer, offset)
                raw = buffer[offset + _EVENT.size : offset + _EVENT.size + length]
                offset += _EVENT.size + length
                self._one(wd, mask, os.fsdecode(raw.rstrip(b"\0")))

    def _one(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_IGNORED:
            self.paths.pop(wd, None)
            return
        folder = self.paths.get(wd)
        if folder is None or mask & IN_Q_OVERFLOW:
            return
        path = os.path.join(folder, name) if name else folder
        for bits, kind in _TYPES:
            if mask & bits:
                self._say(path, kind)
        if self.recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            # What was made in it before its watch was placed is reported as made now.
            with contextlib.suppress(OSError):  # gone already, or not ours to read
                for inside in self.add_tree(path):
                    self._say(inside, "EVENT_TYPE_CREATE")

    def _say(self, path: str, kind: str) -> None:
        relative = os.path.relpath(path, self.root)
        _say({"name": "" if relative == "." else relative, "type": kind})


def main(args: list[str]) -> int:
    recursive = "--recursive" in args
    (root,) = [a for a in args if a != "--recursive"]
    if not os.path.isdir(root) or os.path.islink(root):
        missing = not os.path.lexists(root)
        _say({"error": f"{root} is not a folder" if not missing else f"{root} does not exist",
              "code": "not_found" if missing else "invalid_argument"})  # fmt: skip
        return 1
    watcher = _Watcher(root, recursive=recursive)
    try:
        watcher.add_tree(root)
    except OSError as exc:
        _say({"error": f"{root}: {exc.strerror}", "code": "permission_denied"})
        return 1
    _say({"ready": True})
    watcher.events()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
