"""Paused sessions and snapshots on disk: a versioned, atomically written format.

Layout, in the engine's ``paused_dir`` (``[server] data_dir``/``paused`` for ``corral
serve``), every folder 0700 and every file 0600::

    v1/
      paused/<id>/      a session paused to disk (filesystem pause, or a restart): removed
                        when it resumes, is closed, or its time to live passes
      snapshots/<id>/   a snapshot: new sessions start from it; kept until deleted
        meta.json       what it is (``SnapshotMeta``), with ``format`` = ``FORMAT``
        files.tar       the session's regular files (written by the server from what it read
                        below the session's folder, never extracted on the host: each file is
                        put back into a new session through the session's own file checks)
        state.bin       full mode only: the interpreter's globals, written and read inside
                        the sandbox (``sandbox/inside/_keep``), opaque bytes here
      .tmp/             entries being written; a crash leaves only these, swept at start

An entry is written under ``.tmp``, each file fsynced, then renamed into place (and its folder
fsynced): a SIGKILL at any moment leaves either the whole entry or none. One that cannot be
read (corrupt, another format, written by something else) is a ``SnapshotError`` for that
entry alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral import _fs
from corral.errors import SnapshotError, SnapshotNotFound

__all__ = ["FORMAT", "Draft", "Entry", "KeepSafe", "Kind", "PauseMode", "SnapshotMeta", "new_id"]

FORMAT = 1
"""The on-disk format version; an entry of another is refused, never guessed at."""
_FORMAT_FOLDER = f"v{FORMAT}"
_TMP = ".tmp"
_ID_BYTES = 16
_MAX_META_BYTES = 8 << 20
"""Bytes of one meta.json, written or read (its ``lost`` names at most ``MAX_LOST``)."""

PauseMode = Literal["full", "filesystem"]
Kind = Literal["paused", "snapshots"]


class SnapshotMeta(BaseModel):
    """What an entry is; written by the server, validated when read back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int
    id: str = Field(min_length=1, max_length=200)
    kind: Kind
    tenant: str = Field(max_length=4096)
    mode: PauseMode
    """What it holds: ``full`` (files and the interpreter's globals) or ``filesystem``."""
    created_at: float
    source: str = Field(default="", max_length=200)
    """The session it was taken from."""
    name: str = Field(default="", max_length=256)
    lost: dict[str, str] = Field(default_factory=dict)
    """Globals a full pause could not keep, and why."""
    memory_bytes: int = 0
    """The session's memory limit, to open it again with the same."""
    labels: dict[str, str] = Field(default_factory=dict)
    """What the front end that owns it keeps with it (an E2B sandbox's, a DIAL id's)."""


class Entry:
    """One entry's folder, read-only once written."""

    def __init__(self, path: Path, meta: SnapshotMeta) -> None:
        self.path = path
        self.meta = meta

    @property
    def files(self) -> Path:
        return self.path / "files.tar"

    @property
    def state(self) -> Path | None:
        state = self.path / "state.bin"
        return state if self.meta.mode == "full" and state.exists() else None


class Draft:
    """An entry being written (under ``.tmp``); ``KeepSafe.commit`` puts it in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files = path / "files.tar"
        self.state = path / "state.bin"


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(_ID_BYTES)}"


class KeepSafe:
    """The entries in one ``paused_dir``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root) / _FORMAT_FOLDER
        for folder in (self.root.parent, self.root, *self._folders()):
            _fs.make_private_dir(folder)
        self._sweep_tmp()

    def _folders(self) -> list[Path]:
        return [self.root / "paused", self.root / "snapshots", self.root / _TMP]

    def _sweep_tmp(self) -> None:
        for leftover in (self.root / _TMP).iterdir():
            shutil.rmtree(leftover, ignore_errors=True)

    @contextlib.contextmanager
    def draft(self) -> Iterator[Draft]:
        """A folder to write an entry in; removed if the block fails."""
        path = self.root / _TMP / secrets.token_hex(8)
        path.mkdir(mode=0o700)
        try:
            yield Draft(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise

    def commit(self, draft: Draft, meta: SnapshotMeta) -> Entry:
        """Write ``meta``, fsync everything, rename the draft into place (replacing an entry
        of the same id)."""
        data = meta.model_dump_json().encode()
        if len(data) > _MAX_META_BYTES:  # never an entry the next reader calls corrupt
            raise SnapshotError(f"what the snapshot says of itself exceeds {_MAX_META_BYTES} bytes")
        fd = os.open(draft.path / "meta.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        for name in ("files.tar", "state.bin"):
            path = draft.path / name
            if path.exists():
                os.chmod(path, 0o600)
                _fsync(path)
        _fsync(draft.path)
        target = self.root / meta.kind / meta.id
        old = None
        if target.exists():
            old = self.root / _TMP / f"old-{secrets.token_hex(8)}"
            os.rename(target, old)
        os.rename(draft.path, target)
        _fsync(target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return Entry(target, meta)

    def copy(self, entry: Entry, meta: SnapshotMeta) -> SnapshotMeta:
        """A new entry ``meta`` with ``entry``'s files (and state, if ``meta`` is full)."""
        with self.draft() as draft:
            shutil.copyfile(entry.files, draft.files)
            if meta.mode == "full" and entry.state is not None:
                shutil.copyfile(entry.state, draft.state)
            self.commit(draft, meta)
        return meta

    def get(self, kind: Kind, entry_id: str) -> Entry:
        """Raises: SnapshotNotFound; SnapshotError when it cannot be read."""
        if not entry_id or "/" in entry_id or entry_id.startswith("."):
            raise SnapshotNotFound(f"no snapshot {entry_id!r}")
        path = self.root / kind / entry_id
        if not path.is_dir() or path.is_symlink():
            raise SnapshotNotFound(f"no snapshot {entry_id!r}")
        return Entry(path, _read_meta(path, kind, entry_id))

    def entries(self, kind: Kind) -> tuple[list[Entry], dict[str, SnapshotError]]:
        """Every entry of ``kind``, oldest first, and those that could not be read."""
        good: list[Entry] = []
        bad: dict[str, SnapshotError] = {}
        for path in (self.root / kind).iterdir():
            try:
                good.append(Entry(path, _read_meta(path, kind, path.name)))
            except SnapshotError as exc:
                bad[path.name] = exc
        good.sort(key=lambda e: e.meta.created_at)
        return good, bad

    def delete(self, kind: Kind, entry_id: str) -> bool:
        """Remove an entry at once (renamed away first, then removed); False if absent."""
        if not entry_id or "/" in entry_id or entry_id.startswith("."):
            return False
        path = self.root / kind / entry_id
        if not path.exists():
            return False
        gone = self.root / _TMP / f"gone-{secrets.token_hex(8)}"
        os.rename(path, gone)
        shutil.rmtree(gone, ignore_errors=True)
        return True


def _read_meta(path: Path, kind: Kind, entry_id: str) -> SnapshotMeta:
    try:
        fd = os.open(path / "meta.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            raw = os.read(fd, _MAX_META_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SnapshotError(f"snapshot {entry_id} cannot be read: {exc.strerror}") from None
    try:
        fields = json.loads(raw)
    except ValueError:
        raise SnapshotError(f"snapshot {entry_id} is corrupt: its meta.json is not JSON") from None
    if not isinstance(fields, dict) or fields.get("format") != FORMAT:
        found = fields.get("format") if isinstance(fields, dict) else None
        raise SnapshotError(
            f"snapshot {entry_id} is not in corral's format {FORMAT} (found {found!r})"
        )
    try:
        meta = SnapshotMeta.model_validate(fields)
    except ValidationError as exc:
        raise SnapshotError(f"snapshot {entry_id} is corrupt: {exc.errors()[0]['msg']}") from None
    if meta.id != entry_id or meta.kind != kind:
        raise SnapshotError(f"snapshot {entry_id} is foreign: it names itself {meta.id!r}")
    return meta


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def now() -> float:
    return time.time()
