"""Session file operations, confined beneath the session's folder and done as its owner.

Every operation resolves beneath a descriptor of the session's ``/mnt/data`` opened before
any user code ran, never follows a symlink (``corral._fs``), and runs in a worker thread whose
file-system uid and gid are the sandbox's: whatever the path, the server can touch nothing the
sandboxed user could not, and the files it writes belong to that user.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TypeVar

import anyio

from corral import _fs
from corral.engine._result import FileInfo
from corral.errors import SessionDiskFull
from corral.sandbox import as_fs_owner

__all__ = ["SessionFiles"]

T = TypeVar("T")

_as_owner = as_fs_owner


async def _once(data: bytes | bytearray | memoryview) -> AsyncIterator[bytes]:
    yield bytes(data)


class SessionFiles:
    """put / get / list / delete beneath one session folder."""

    def __init__(self, dir_fd: int, uid: int, gid: int, max_file_bytes: int) -> None:
        self._root = f"/proc/self/fd/{dir_fd}"
        self._uid = uid
        self._gid = gid
        self._max_file_bytes = max_file_bytes

    @property
    def quota_bytes(self) -> int:
        """The session's disk quota, which bounds any one file too."""
        return self._max_file_bytes

    async def _run(self, action: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(_as_owner, self._uid, self._gid, action)

    async def put(self, path: str, data: bytes | AsyncIterable[bytes]) -> FileInfo:
        """Write ``data`` (bytes, or chunks as they arrive) atomically, replacing any file.

        Chunks are written as they come, so an upload never has to fit in memory; if the
        iterable raises, nothing is written and the exception propagates.

        Raises:
            InvalidPath: the path is malformed, escapes the folder or crosses a symlink.
            FileTooLarge: the file alone is larger than the session's disk quota.
            SessionDiskFull: the session's disk quota would be exceeded; nothing is written.
        """
        rel = _fs.validate_relpath(path)
        chunks = _once(data) if isinstance(data, bytes | bytearray | memoryview) else data
        digest = hashlib.sha256()
        try:
            writer = await self._run(
                lambda: _fs.AtomicWriter(self._root, rel, max_bytes=self._max_file_bytes)
            )
            try:
                async for chunk in chunks:
                    digest.update(chunk)
                    await anyio.to_thread.run_sync(writer.write, bytes(chunk))
                size = await self._run(writer.commit)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(writer.abort)
                raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise SessionDiskFull(f"{rel}: the session's disk quota is exhausted") from None
            raise
        return FileInfo(str(rel), size, digest.hexdigest())

    async def get(self, path: str, max_bytes: int | None = None) -> bytes:
        """Raises: InvalidPath; FileNotFoundError when there is no regular file there."""
        rel = _fs.validate_relpath(path)
        return await self._run(lambda: _fs.read_bytes(self._root, rel, max_bytes=max_bytes))

    async def open(self, path: str) -> tuple[int, int]:
        """An open descriptor of a regular file and its size then; the caller closes it.

        Raises: InvalidPath; FileNotFoundError when there is no regular file there.
        """
        rel = _fs.validate_relpath(path)
        return await self._run(lambda: _fs.open_file(self._root, rel))

    async def list(self, max_entries: int = _fs.DEFAULT_MAX_ENTRIES) -> _fs.Listing:
        """At most ``max_entries`` files, sorted; ``truncated`` when there were more."""
        return await self._run(lambda: _fs.list_files(self._root, max_entries=max_entries))

    async def delete(self, path: str) -> None:
        """Raises: InvalidPath; FileNotFoundError."""
        rel = _fs.validate_relpath(path)
        await self._run(lambda: _fs.delete(self._root, rel))

    async def usage(self) -> int:
        return await self._run(lambda: _fs.disk_usage(self._root))

    # Folder operations, for front ends with a file-system API (E2B's envd).

    async def lstat(self, path: str) -> os.stat_result:
        """Raises: InvalidPath; FileNotFoundError. ``""`` or ``.`` is the session's folder."""
        return await self._run(lambda: _fs.lstat(self._root, path))

    async def list_dir(
        self, path: str, *, depth: int, max_entries: int
    ) -> builtins.list[tuple[str, os.stat_result]]:
        """Raises: InvalidPath; FileNotFoundError; NotADirectoryError."""
        return await self._run(
            lambda: _fs.list_dir(self._root, path, depth=depth, max_entries=max_entries)
        )

    async def make_dir(self, path: str) -> bool:
        """Raises: InvalidPath; SessionDiskFull."""
        try:
            return await self._run(lambda: _fs.make_dir(self._root, path))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise SessionDiskFull(f"{path}: the session's disk quota is exhausted") from None
            raise

    async def move(self, source: str, destination: str) -> None:
        """Raises: InvalidPath; FileNotFoundError."""
        await self._run(lambda: _fs.move(self._root, source, destination))

    async def remove(self, path: str) -> None:
        """A file, a link or a whole folder. Raises: InvalidPath; FileNotFoundError."""
        await self._run(lambda: _fs.remove_tree(self._root, path))
