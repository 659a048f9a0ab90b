"""The files store keeps tenants' data private: its folder 0700, its files 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from corral.http._store import FileStore

pytestmark = pytest.mark.anyio


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def test_the_store_folder_is_0700_and_every_file_in_it_0600(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    store = FileStore(folder)
    stored = await store.put_bytes("bucket", "a/b.txt", b"secret", "text/plain")
    assert await store.read(stored) == b"secret"
    folders = [Path(root) for root, _, _ in os.walk(folder)]
    assert folder / "blobs" in folders
    assert any(path.parent == folder / "blobs" for path in folders)  # blobs/6c and the like
    for path in folders:
        assert _mode(path) == 0o700, path
    files = [Path(root) / name for root, _, names in os.walk(folder) for name in names]
    assert folder / "files.sqlite3" in files
    assert any(path.parent.parent == folder / "blobs" for path in files)  # the blob itself
    for path in files:  # the database, its -wal and -shm, and the blob
        assert _mode(path) == 0o600, path


async def test_a_loose_existing_store_is_tightened(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir(mode=0o755)
    (folder / "files.sqlite3").touch(mode=0o644)
    (folder / "blobs" / "6c").mkdir(mode=0o755, parents=True)  # as an older corral made it
    FileStore(folder)
    assert _mode(folder) == 0o700
    assert _mode(folder / "blobs" / "6c") == 0o700
    assert _mode(folder / "files.sqlite3") == 0o600


def test_a_linked_store_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o755)
    (tmp_path / "files").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NotADirectoryError):  # O_NOFOLLOW | O_DIRECTORY on a link
        FileStore(tmp_path / "files")
    assert _mode(tmp_path / "elsewhere") == 0o755
    assert os.listdir(tmp_path / "elsewhere") == []
