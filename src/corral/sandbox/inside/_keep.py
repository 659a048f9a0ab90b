"""Inside a session's interpreter: its variables and imports written to a file, and read back.

This is how a session's full state outlives its processes (a restart of the server, a pause
kept on disk, a snapshot that starts other sessions): there is no process checkpointing on
this host, so the interpreter keeps what Python can: every global that ``cloudpickle`` can
write (functions and classes defined in cells by value), every imported module by name (it
is imported again), and it names what it could not keep (open files, sockets, threads,
generators, processes it started). The file is written and read inside the sandbox only:
the server copies it as opaque bytes and never unpickles it.

Stream: ``MAGIC``, each value's pickle (or module's name) one after the other, a JSON index
of (kind, name, start, end), and the index's offset (8 bytes). Each value is pickled on its own,
so one that cannot be loaded again is named and skipped, and the others come back. It is
written as files no larger than the session's file-size limit; the server joins them.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import sys
import types
from typing import Any

__all__ = ["MAGIC", "load", "save"]

MAGIC = b"corral-keep-1\n"
_LENGTH = struct.Struct("<Q")  # the index's offset, at the very end
_MAX_CHUNK = 32 << 20  # bytes per file of a saved state (below any session's file limit)
_SKIP = frozenset({"input_files", "input_assets", "__builtins__", "get_ipython"})
"""Names the runner sets for each run (or that are its own): never kept, set again."""
_MAX_REASON = 120  # characters of why one name could not be kept
_MAX_NAMED = 200  # lost names a report lists (it must fit a run's stdout)


def _say(kept: list[str], lost: dict[str, str], *, files: int = 0) -> None:
    named = {k[:_MAX_REASON]: v for k, v in list(lost.items())[:_MAX_NAMED]}
    report = {"kept": len(kept), "lost": named, "lost_count": len(lost), "files": files}
    print(json.dumps(report))


def _kept_names(namespace: dict[str, Any]) -> list[str]:
    return [
        name
        for name in namespace
        if not (name.startswith("__") and name.endswith("__")) and name not in _SKIP
    ]


class _Rolling(io.RawIOBase):
    """One stream written as files of at most ``size`` bytes each (``path.0``, ``path.1``, ...):
    a session's files may not be larger than its file-size limit, its state may."""

    def __init__(self, path: str, size: int) -> None:
        super().__init__()
        self._path, self._size = path, size
        self._files: list[io.BufferedWriter] = []
        self._total = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._total

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            if not self._files or self._files[-1].tell() >= self._size:
                self._files.append(open(f"{self._path}.{len(self._files)}", "wb"))  # noqa: SIM115
            current = self._files[-1]
            room = self._size - current.tell()
            current.write(view[done : done + room])
            done += min(room, len(view) - done)
        self._total += done
        return done

    def rollback(self, offset: int) -> None:
        """Forget everything past ``offset`` (a value that could not be pickled)."""
        needed = max(1, -(-offset // self._size))
        while len(self._files) > needed:
            extra = self._files.pop()
            extra.close()
            os.unlink(extra.name)
        if self._files:
            local = offset - (len(self._files) - 1) * self._size
            self._files[-1].truncate(local)
            self._files[-1].seek(local)
        self._total = offset

    def finish(self) -> int:
        """Flush and close every file; returns how many there are."""
        for handle in self._files:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        return len(self._files)


def _chunk_bytes() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return _MAX_CHUNK if soft == resource.RLIM_INFINITY else max(min(soft, _MAX_CHUNK), 4096)


def save(path: str) -> None:
    """Write ``__main__``'s globals to ``path.0``, ``path.1``, ... (one stream: ``MAGIC``, each
    value's pickle or module's name, a JSON index of them, the index's offset in 8 bytes);
    print what was kept and lost, and how many files, as JSON."""
    import cloudpickle

    namespace = sys.modules["__main__"].__dict__
    kept: list[str] = []
    lost: dict[str, str] = {}
    index: list[tuple[str, str, int, int]] = []
    out = _Rolling(path, _chunk_bytes())
    out.write(MAGIC)
    for name in _kept_names(namespace):
        value = namespace[name]
        start = out.tell()
        try:
            if isinstance(value, types.ModuleType):
                out.write(value.__name__.encode())
                kind = "m"
            else:
                cloudpickle.dump(value, out, protocol=5)
                kind = "v"
        except Exception as exc:  # noqa: BLE001 - whatever pickling raised: named, with why
            out.rollback(start)
            lost[name] = f"{type(value).__name__}: {type(exc).__name__}: {exc}"[:_MAX_REASON]
            continue
        index.append((kind, name, start, out.tell()))
        kept.append(name)
    where = out.tell()
    out.write(json.dumps(index).encode())
    out.write(_LENGTH.pack(where))
    files = out.finish()
    _say(kept, lost, files=files)


def _function(value: types.FunctionType, namespace: dict[str, Any]) -> types.FunctionType:
    """The function again with the session's globals as its own (cloudpickle gives each a
    copy of the globals it named, so it would not see later assignments)."""
    if value.__module__ != "__main__" or value.__globals__ is namespace:
        return value
    again = types.FunctionType(
        value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
    )
    again.__kwdefaults__ = value.__kwdefaults__
    again.__qualname__ = value.__qualname__
    again.__annotations__ = value.__annotations__
    again.__dict__.update(value.__dict__)
    return again


def _rehome(value: Any, namespace: dict[str, Any]) -> Any:
    """Functions and the methods of classes defined in cells, on the session's globals."""
    if isinstance(value, types.FunctionType):
        return _function(value, namespace)
    if isinstance(value, type) and value.__module__ == "__main__":
        for attr, item in list(vars(value).items()):
            if isinstance(item, types.FunctionType):
                setattr(value, attr, _function(item, namespace))
            elif isinstance(item, (staticmethod, classmethod)) and isinstance(
                item.__func__, types.FunctionType
            ):
                setattr(value, attr, type(item)(_function(item.__func__, namespace)))
    return value


def load(path: str) -> None:
    """Read what ``save`` wrote (joined into one file at ``path``) back into ``__main__``;
    print what came back and what did not as JSON; remove the file."""
    import importlib

    import cloudpickle

    namespace = sys.modules["__main__"].__dict__
    kept: list[str] = []
    lost: dict[str, str] = {}
    try:
        with open(path, "rb") as source:
            if source.read(len(MAGIC)) != MAGIC:
                raise ValueError("not a corral interpreter state")
            source.seek(-_LENGTH.size, os.SEEK_END)
            (where,) = _LENGTH.unpack(source.read(_LENGTH.size))
            end = source.seek(0, os.SEEK_END) - _LENGTH.size
            source.seek(where)
            index = json.loads(source.read(end - where))
            for kind, name, start, stop in index:
                source.seek(start)
                try:
                    if kind == "m":
                        module = source.read(stop - start).decode()
                        namespace[name] = importlib.import_module(module)
                    else:
                        namespace[name] = _rehome(cloudpickle.load(source), namespace)
                except Exception as exc:  # noqa: BLE001 - whatever loading raised: named
                    lost[name] = f"{type(exc).__name__}: {exc}"[:_MAX_REASON]
                else:
                    kept.append(name)
    finally:
        os.unlink(path)
    _say(kept, lost)
