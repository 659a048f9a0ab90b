"""E2B paths and the session's folder: ``/home/user`` is the session's folder, ``/mnt/data``.

The file APIs reach that folder only, through the session file API (confined beneath it, no
link followed, the disk quota kept); a path elsewhere is refused as outside the sandbox's
files. Relative paths are relative to the home, as envd resolves them.
"""

from __future__ import annotations

import posixpath

from corral.e2b._contexts import HOME

__all__ = ["OutsideHome", "e2b_path", "session_path"]

_MAX_PATH = 4096


class OutsideHome(ValueError):
    """The path is not below ``/home/user``."""


def session_path(path: str) -> str:
    """The session-relative path of an E2B path (``.`` for the home itself).

    Raises:
        OutsideHome: elsewhere, or malformed.
    """
    if not path or len(path) > _MAX_PATH or "\0" in path:
        raise OutsideHome(f"{path!r}: not a usable path")
    absolute = path if path.startswith("/") else posixpath.join(HOME, path)
    normal = posixpath.normpath(absolute)
    if normal == HOME:
        return "."
    if not normal.startswith(HOME + "/"):
        raise OutsideHome(f"{path}: only {HOME} and what it holds are reachable")
    return normal[len(HOME) + 1 :]


def e2b_path(rel: str) -> str:
    return HOME if rel in ("", ".") else f"{HOME}/{rel}"
