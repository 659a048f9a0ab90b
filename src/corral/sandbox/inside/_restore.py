"""Between two cases of a case server: its writable folders and IPC put back as they were.

A case runs as its server's uid, so it may do to ``/work``, ``/tmp`` and ``/dev/shm`` whatever
the server could: create and remove entries, ``chmod`` the folders (``chmod 0555 /work`` would
fail every later case), set their access and modification times, and set extended
attributes: ``user.*`` ones and POSIX ACLs, whose default entries would shape the mode of
every file a later case makes there. The server records the folders once its program is
prepared (``snapshot``) and after each case (``restore``) removes every entry the record does
not hold and puts back, on every one it does (the folders themselves and ``/tmp/matplotlib``
among them), the mode, owner, extended attributes and times. A change of owner is out of a
case's reach anyway (its user namespace maps one uid and one gid); the restore checks it all
the same.

What it cannot put back is what no unprivileged process can set: a folder's change time
(``st_ctime``, which every restore sets to its own time, whatever the case did) and the
inode numbers the file system hands out next.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from dataclasses import dataclass

__all__ = ["RESTORE_SECONDS", "ROOTS", "Baseline", "remove_sysv_ipc", "restore", "snapshot"]

ROOTS = ("/work", "/tmp", "/dev/shm")  # noqa: S108 - the worker's own tmpfs mounts
"""The writable folders of a one-shot worker (``/mnt/data`` is ``/work`` bound again)."""
RESTORE_SECONDS = 0.5
"""How long a restore may take. It runs after the case gave back its slot: past this, the
server gives up (unclean, so the engine replaces it) rather than spend CPU no slot holds."""
_IPC_RMID = 0
_SYSV = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))


@dataclass(frozen=True, slots=True)
class Entry:
    """What the restore puts back on an entry it finds where the record has it."""

    mode: int
    """The whole ``st_mode``: its type and permission bits."""
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    xattrs: tuple[tuple[str, bytes], ...]
    """Every extended attribute, by name (POSIX ACLs are ``system.posix_acl_*``)."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The writable folders as recorded: ``entries`` holds each root and everything under
    it, None for a mount point (the runtime's read-only binds, never entered)."""

    roots: tuple[str, ...]
    entries: dict[str, Entry | None]


def _xattrs(path: str) -> tuple[tuple[str, bytes], ...]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.ENOTSUP:
            return ()
        raise
    return tuple(sorted((n, os.getxattr(path, n, follow_symlinks=False)) for n in names))


def _entry(path: str, info: os.stat_result) -> Entry:
    return Entry(
        info.st_mode, info.st_uid, info.st_gid, info.st_atime_ns, info.st_mtime_ns, _xattrs(path)
    )


def snapshot(roots: tuple[str, ...] = ROOTS) -> Baseline:
    """Record ``roots`` and everything under them."""
    entries: dict[str, Entry | None] = {}
    for root in roots:
        device = os.lstat(root).st_dev
        folders = [root]
        while folders:
            folder = folders.pop()
            with os.scandir(folder) as listing:
                for entry in listing:
                    info = entry.stat(follow_symlinks=False)
                    if info.st_dev != device:
                        entries[entry.path] = None
                    elif stat.S_ISDIR(info.st_mode):
                        folders.append(entry.path)
                    else:
                        entries[entry.path] = _entry(entry.path, info)
            # Once listed: a listing may set the folder's access time.
            entries[folder] = _entry(folder, os.lstat(folder))
    return Baseline(roots, entries)


def _put_back(path: str, kept: Entry) -> None:
    """Give a recorded folder its owner, extended attributes, mode and times back."""
    info = os.lstat(path)
    if (info.st_uid, info.st_gid) != (kept.uid, kept.gid):
        os.chown(path, kept.uid, kept.gid, follow_symlinks=False)
    xattrs = _xattrs(path)
    if xattrs != kept.xattrs:
        wanted = dict(kept.xattrs)
        for name, value in xattrs:
            if name not in wanted:
                os.removexattr(path, name, follow_symlinks=False)
            elif wanted[name] != value:
                os.setxattr(path, name, wanted[name], follow_symlinks=False)
        for name in wanted.keys() - dict(xattrs).keys():
            os.setxattr(path, name, wanted[name], follow_symlinks=False)
    # After the ACLs: setting one rewrites the group bits of the mode.
    if os.lstat(path).st_mode != kept.mode:
        os.chmod(path, stat.S_IMODE(kept.mode), follow_symlinks=False)
    # Always, even unchanged: the change time it sets is then the restore's, not a sign of
    # whether the case touched the folder.
    os.utime(path, ns=(kept.atime_ns, kept.mtime_ns), follow_symlinks=False)


def _wipe(
    folder: str, mode: int, device: int, entries: dict[str, Entry | None], deadline: float
) -> int:
    """Remove from ``folder`` whatever the record does not hold; the number of recorded
    entries found at and under it, as they were (recorded folders get their attributes back).

    The listing is read as it goes and checked against ``deadline`` (``time.monotonic``)
    entry by entry, so a folder of a million files costs neither its whole listing in memory
    nor more than the time allowed; subfolders are entered once it is closed, one open
    descriptor at a time.

    Raises:
        TimeoutError: past ``deadline``, with the folder half wiped.
    """
    kept = entries.get(folder)
    if kept is not None and mode != kept.mode:
        os.chmod(folder, stat.S_IMODE(kept.mode), follow_symlinks=False)  # one made unreadable
    found = 0
    folders: list[tuple[str, int]] = []
    with os.scandir(folder) as listing:
        for entry in listing:
            if time.monotonic() > deadline:
                raise TimeoutError("restoring the folders took too long")
            info = entry.stat(follow_symlinks=False)
            if info.st_dev != device:  # a mount point (the runtime's read-only binds): left be
                found += entry.path in entries and entries[entry.path] is None
            elif stat.S_ISDIR(info.st_mode):
                folders.append((entry.path, info.st_mode))
            else:
                os.unlink(entry.path)
    for path, inner_mode in folders:
        inner = entries.get(path)
        if inner is not None and stat.S_ISDIR(inner.mode):
            found += _wipe(path, inner_mode, device, entries, deadline)
        else:
            _wipe(path, inner_mode, device, entries, deadline)  # nothing in it is recorded
            os.rmdir(path)
    if kept is not None:
        _put_back(folder, kept)  # last: removing its entries set its times
        found += 1
    return found


def restore(baseline: Baseline, seconds: float = RESTORE_SECONDS) -> bool:
    """Put the folders back as recorded; False if they could not be, or not within
    ``seconds``."""
    deadline = time.monotonic() + seconds
    try:
        found = 0
        for root in baseline.roots:
            info = os.lstat(root)
            found += _wipe(root, info.st_mode, info.st_dev, baseline.entries, deadline)
    except (OSError, RecursionError, ValueError):
        return False
    return found == len(baseline.entries)


_LIBC = ctypes.CDLL(None, use_errno=True)


def remove_sysv_ipc() -> bool:
    """Remove every System V IPC object of the namespace; False if one could not be."""
    for kind, call in _SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as table:
                rows = table.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        except OSError:
            return False
        remove = getattr(_LIBC, call)
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                result = remove(ident, 0, _IPC_RMID)
            else:
                result = remove(ident, _IPC_RMID, None)
            if result < 0:
                return False
    return True
