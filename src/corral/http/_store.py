"""The gateway's files store: SQLite metadata beside a folder of immutable blobs.

Every write lands in a fresh blob (atomic temp file + rename, :mod:`corral._fs`), and only then
does one SQLite transaction point the ``(bucket, path)`` row at it; the replaced blob is removed
afterwards. A crash therefore leaves either the old file or the new one, plus at worst an
unreferenced blob, which the next start removes. Paths are never used as file names, so no
bucket path can reach the host file system. One process owns a data folder at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from corral import _fs
from corral.errors import BucketFull, FileTooLarge

__all__ = ["FileStore", "StoredFile"]

_BATCH = 1024 * 1024  # bytes gathered before one write in a worker thread
_FILE_MODE = 0o600
_FOLDER_MODE = 0o700
_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    bucket TEXT NOT NULL,
    path TEXT NOT NULL,
    blob TEXT NOT NULL,
    size INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    etag TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (bucket, path)
) WITHOUT ROWID
"""
_SELECT = """SELECT bucket, path, blob, size, content_type, etag, created_at, updated_at
FROM files WHERE bucket = ? AND path = ?"""
_USED = "SELECT COALESCE(SUM(size), 0) FROM files WHERE bucket = ? AND path != ?"
_UPSERT = """INSERT OR REPLACE INTO files
(bucket, path, blob, size, content_type, etag, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""


@dataclass(frozen=True, slots=True)
class StoredFile:
    """Metadata of one stored file; times are milliseconds since the epoch."""

    bucket: str
    path: str
    blob: str
    size: int
    content_type: str
    etag: str
    created_at: int
    updated_at: int


class FileStore:
    """Files by ``(bucket, path)``; safe to share between requests and threads."""

    def __init__(self, folder: Path, *, bucket_quota: int | None = None) -> None:
        """Open (or create) the store in ``folder`` and drop blobs no row refers to.

        ``bucket_quota`` bounds the bytes one bucket holds (None: unbounded): the host's disk
        is shared by every key, so no key may fill it.

        The folder and every folder in it are 0700 and its files 0600: uploads are tenants'
        data (SQLite gives its -wal and -shm files the database's own mode). Blob folders an
        older corral made 0755 are tightened here.
        """
        self._blobs = folder / "blobs"
        self._quota = bucket_quota
        _fs.make_private_dir(folder)
        _fs.make_private_dir(self._blobs)
        with os.scandir(self._blobs) as folders:
            for folder_entry in folders:
                if folder_entry.is_dir(follow_symlinks=False):
                    _fs.make_private_dir(folder_entry.path)
        self._db = folder / "files.sqlite3"
        _fs.create_private_file(self._db)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            referenced = {row[0] for row in db.execute("SELECT blob FROM files")}
        for entry in _fs.list_files(self._blobs, max_entries=None):  # our own tree: all of it
            if entry.path not in referenced:
                _fs.delete(self._blobs, entry.path)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self._db, timeout=10.0, isolation_level=None)
        try:
            yield db
        finally:
            db.close()

    async def get(self, bucket: str, path: str) -> StoredFile | None:
        """The file's metadata, or None."""
        return await anyio.to_thread.run_sync(self._get, bucket, path)

    def _get(self, bucket: str, path: str) -> StoredFile | None:
        with self._connect() as db:
            row = db.execute(_SELECT, (bucket, path)).fetchone()
        return None if row is None else StoredFile(*row)

    async def read(self, file: StoredFile) -> bytes:
        """The file's bytes.

        Raises:
            FileNotFoundError: it was replaced or deleted since ``file`` was looked up.
        """
        return await anyio.to_thread.run_sync(_fs.read_bytes, self._blobs, file.blob)

    async def put(
        self,
        bucket: str,
        path: str,
        chunks: AsyncIterator[bytes],
        content_type: str,
        *,
        max_bytes: int | None = None,
    ) -> StoredFile:
        """Store the streamed bytes, replacing any file at ``path``.

        Raises:
            FileTooLarge: more than ``max_bytes``; nothing changed.
            BucketFull: the bucket's quota would be exceeded; nothing changed.
        """
        room = None
        if self._quota is not None:
            room = self._quota - await anyio.to_thread.run_sync(self._used, bucket, path)
            if room < 0:
                raise BucketFull(f"bucket {bucket} is at its quota of {self._quota} bytes")
        bound = max_bytes if room is None else room if max_bytes is None else min(max_bytes, room)
        blob = f"{secrets.token_hex(1)}/{secrets.token_hex(16)}"
        writer = await anyio.to_thread.run_sync(
            lambda: _fs.AtomicWriter(
                self._blobs, blob, max_bytes=bound, mode=_FILE_MODE, dir_mode=_FOLDER_MODE
            )
        )
        digest = hashlib.sha256()
        try:
            batch = bytearray()
            async for chunk in chunks:
                batch += chunk
                digest.update(chunk)
                if len(batch) >= _BATCH:
                    await anyio.to_thread.run_sync(writer.write, bytes(batch))
                    batch.clear()
            await anyio.to_thread.run_sync(writer.write, bytes(batch))
            size = await anyio.to_thread.run_sync(writer.commit)
        except FileTooLarge:
            if room is not None and (max_bytes is None or room < max_bytes):
                raise BucketFull(
                    f"bucket {bucket} would exceed its quota of {self._quota} bytes"
                ) from None
            raise
        finally:
            writer.abort()
        etag = digest.hexdigest()[:32]
        return await anyio.to_thread.run_sync(
            self._record, bucket, path, blob, size, content_type, etag
        )

    async def put_bytes(self, bucket: str, path: str, data: bytes, content_type: str) -> StoredFile:
        """Store ``data``, replacing any file at ``path``."""

        async def one() -> AsyncIterator[bytes]:
            yield data

        return await self.put(bucket, path, one(), content_type)

    def _used(self, bucket: str, path: str) -> int:
        """Bytes the bucket holds besides the file at ``path`` (which a write replaces)."""
        with self._connect() as db:
            return int(db.execute(_USED, (bucket, path)).fetchone()[0])

    def _record(
        self, bucket: str, path: str, blob: str, size: int, content_type: str, etag: str
    ) -> StoredFile:
        now = int(time.time() * 1000)
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            # Checked again inside the transaction: writes to one bucket may race.
            used = 0 if self._quota is None else db.execute(_USED, (bucket, path)).fetchone()[0]
            if self._quota is not None and used + size > self._quota:
                db.execute("ROLLBACK")
                with contextlib.suppress(FileNotFoundError):
                    _fs.delete(self._blobs, blob)
                raise BucketFull(f"bucket {bucket} would exceed its quota of {self._quota} bytes")
            old = db.execute(
                "SELECT blob, created_at FROM files WHERE bucket = ? AND path = ?", (bucket, path)
            ).fetchone()
            created = now if old is None else old[1]
            db.execute(
                _UPSERT,
                (bucket, path, blob, size, content_type, etag, created, now),
            )
            db.execute("COMMIT")
        if old is not None:
            with contextlib.suppress(FileNotFoundError):
                _fs.delete(self._blobs, old[0])
        return StoredFile(bucket, path, blob, size, content_type, etag, created, now)

    async def delete(self, bucket: str, path: str) -> bool:
        """Remove a file; False when there was none."""
        return await anyio.to_thread.run_sync(self._delete, bucket, path)

    def _delete(self, bucket: str, path: str) -> bool:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            old = db.execute(
                "SELECT blob FROM files WHERE bucket = ? AND path = ?", (bucket, path)
            ).fetchone()
            db.execute("DELETE FROM files WHERE bucket = ? AND path = ?", (bucket, path))
            db.execute("COMMIT")
        if old is None:
            return False
        with contextlib.suppress(FileNotFoundError):
            _fs.delete(self._blobs, old[0])
        return True

    def blob_location(self, file: StoredFile) -> tuple[Path, str]:
        """The blobs folder and the blob's path in it, for :func:`corral._fs.open_file`."""
        return self._blobs, file.blob
