"""The working folder as code sees it: sources under their own names, and what a run changed.

Runs inside the sandbox, beside the runner. Sources are symbolic links into the read-only
``/inputs`` bind, so writing through one fails with ``EROFS`` and the file report (regular
files only) never lists them. A session's report lists what the run created or changed: the
folder is listed before the code runs and compared after.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from collections.abc import Callable

from corral.sandbox._protocol import InputSpec
from corral.sandbox.inside._fitting import escape_name

__all__ = ["Snapshot", "changed_paths", "changed_since", "link_sources", "make_usable", "snapshot"]

_FOLDER_MODE = 0o755  # a working folder's mode when it is made

_SNAPSHOT_ENTRIES = 100_000
"""Entries (files and folders) listed before a session run; past this, the files not seen
count as changed, so a huge folder costs the run a bounded walk, never the server."""

Snapshot = dict[str, tuple[int, int, int, int]]
"""Relative path (escaped as the file report escapes it) to (inode, size, mtime ns, ctime ns)
of each regular file."""


def _plain_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\x00" not in name
    )


def make_usable(folder: str) -> None:
    """Give the working folder back its owner's access if the code took it away (``chmod 0
    .``): its files are reported from it, and the next run starts in it."""
    if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
        with contextlib.suppress(OSError):
            os.chmod(folder, _FOLDER_MODE)


def link_sources(items: tuple[InputSpec, ...], cwd: str) -> None:
    """Show each named input under its base name in ``cwd``; the first of a name wins."""
    for item in items:
        if not _plain_name(item.name):
            continue
        suffix = "orig" if item.original else "txt"
        with contextlib.suppress(OSError):
            os.symlink(f"/inputs/{item.id}.{suffix}", os.path.join(cwd, item.name))


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def snapshot(root: str) -> Snapshot:
    """The regular files under ``root`` on its file system: no recursion, one directory
    descriptor at a time, at most ``_SNAPSHOT_ENTRIES`` entries looked at."""
    seen: Snapshot = {}
    device = os.stat(root).st_dev
    pending = [("", "")]  # (path on disk, path as reported)
    budget = _SNAPSHOT_ENTRIES
    while pending and budget > 0:
        real, shown = pending.pop()
        try:
            with os.scandir(os.path.join(root, real) if real else root) as entries:
                listed = list(itertools.islice(entries, budget))
        except OSError:
            continue
        budget -= len(listed)
        for entry in listed:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            name = escape_name(entry.name)
            if stat.S_ISDIR(st.st_mode) and st.st_dev == device:
                pending.append((os.path.join(real, entry.name), f"{shown}{name}/"))
            elif stat.S_ISREG(st.st_mode):
                seen[shown + name] = _key(st)
    return seen


def changed_since(before: Snapshot) -> Callable[[str, os.stat_result], bool]:
    """A filter for the file report: files absent from ``before`` or different since."""

    def changed(path: str, st: os.stat_result) -> bool:
        return before.get(path) != _key(st)

    return changed


def changed_paths(before: Snapshot, after: Snapshot) -> list[str]:
    """The files of ``after`` absent from ``before`` or different since, sorted."""
    return sorted(rel for rel, key in after.items() if before.get(rel) != key)
