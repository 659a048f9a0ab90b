"""corral's own runtime directory: root-owned, mode 0700, never reached through a link.

Whatever the zygote writes while it is still root (matplotlib's font cache and config, any
other cache a preloaded library keeps) goes here instead of a shared path like
``/tmp/matplotlib``, where another local user could plant a symlink to a file of root's or a
config file of their own for every worker to load. Each component is created with ``mkdir``
(which never follows a link), then opened with ``O_NOFOLLOW`` and checked: a directory, ours,
not writable by anyone else.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from corral.errors import IsolationError

__all__ = ["private_dir", "runtime_dir"]

_MODE = 0o700
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``/run/corral`` for root (else ``$XDG_RUNTIME_DIR/corral``), created and checked.

    Raises:
        IsolationError: it exists but is a link, not a directory, or not ours alone.
    """
    env = os.environ if environ is None else environ
    base = "/run" if os.geteuid() == 0 or "XDG_RUNTIME_DIR" not in env else env["XDG_RUNTIME_DIR"]
    return private_dir(Path(base), "corral")


def private_dir(parent: Path, *names: str) -> Path:
    """``parent/names...``, each created 0700 if missing and checked without following links.

    ``parent`` itself must be a real directory that only root (or we) can replace entries in.

    Raises:
        IsolationError: a component is a link, not a directory, or not ours alone.
    """
    fd = os.open(parent, _DIR_FLAGS)
    try:
        _check(fd, parent, own=False)
        path = parent
        for name in names:
            path = path / name
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, _MODE, dir_fd=fd)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP for a link, ENOTDIR for anything else
                raise IsolationError(f"{path} is not a directory of corral's: {exc}") from exc
            os.close(fd)
            fd = child
            _check(fd, path, own=True)
        return path
    finally:
        os.close(fd)


def _check(fd: int, path: Path, *, own: bool) -> None:
    info = os.fstat(fd)
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        raise IsolationError(f"{path} belongs to uid {info.st_uid}, not to corral's user")
    writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if own:
        if info.st_uid != me:
            raise IsolationError(f"{path} belongs to uid {info.st_uid}, not to corral's user")
        if stat.S_IMODE(info.st_mode) != _MODE:
            os.fchmod(fd, _MODE)  # ours, so only its mode needs mending
    elif writable_by_others and not info.st_mode & stat.S_ISVTX:
        raise IsolationError(f"{path} is writable by others: no place for corral's files")
