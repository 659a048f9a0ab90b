"""DIAL's path rules for session files (docs/dial.md §2.3), with a component-wise check.

A request path is joined to the session root (absolute paths are taken as they are),
normalised lexically, and accepted only when it lies *inside* the root component by
component, so ``/mnt/data2/x`` is not inside ``/mnt/data``. Links are not resolved here: the
file operations below never follow one (:mod:`corral._fs`, the engine's session files).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import NoReturn

from corral._fs import NAME_MAX, PATH_MAX
from corral.http._errors import fail

__all__ = ["VIRTUAL_ROOT", "Resolved", "bad_path", "resolve"]

VIRTUAL_ROOT = "/mnt/data"
"""The session root as gateway callers see it (the DIAL image's working directory)."""


def bad_path(absolute: str) -> NoReturn:
    """400 ``{"detail":"Bad path: <absolute>"}``, the same body in both modes."""
    fail(400, {"detail": f"Bad path: {absolute}"})


@dataclass(frozen=True, slots=True)
class Resolved:
    """A request path inside the root."""

    absolute: str
    """Normalised absolute path under the root, as DIAL prints it."""
    relative: str
    """Path relative to the root with ``/`` separators; ``.`` for the root itself."""

    @property
    def is_root(self) -> bool:
        return self.relative == "."

    @property
    def rel(self) -> PurePosixPath:
        return PurePosixPath(self.relative)


def resolve(path: str, root: str = VIRTUAL_ROOT) -> Resolved:
    """Resolve ``path`` against ``root`` (which must be absolute and normalised).

    Raises:
        HTTPException: 400 ``Bad path``: outside the root, or a NUL byte; 400 ``Name too
            long``: a name past 255 bytes or a path past PATH_MAX.
    """
    joined = path if path.startswith("/") else f"{root}/{path}"
    absolute = posixpath.normpath(joined)
    if absolute.startswith("//"):
        absolute = "/" + absolute.lstrip("/")  # POSIX keeps "//"; no Linux path means that
    if "\0" in absolute:
        bad_path(absolute)
    raw = absolute.encode("utf-8", "surrogatepass")
    if len(raw) >= PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        # A client's mistake, said as such (the file system would answer ENAMETOOLONG).
        fail(400, {"detail": f"Name too long: {absolute[:64]}..."})
    inside = absolute == root or absolute.startswith(root.rstrip("/") + "/")
    if not inside:
        bad_path(absolute)
    return Resolved(absolute, posixpath.relpath(absolute, root))
