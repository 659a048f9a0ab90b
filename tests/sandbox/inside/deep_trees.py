"""Removing folder chains deeper than recursion allows: ``shutil.rmtree`` (and so pytest's own
clean-up of old temporary folders, which then leaks a directory iterator) fails past ~1,000
levels, so a test that builds one removes it itself."""

from __future__ import annotations

import os
from pathlib import Path


def remove_deep(root: Path, name: str, levels: int) -> None:
    """Remove ``root/name/name/...`` (``levels`` deep) and the files in it, bottom up."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    try:
        for _ in range(levels):
            for entry in os.listdir(fd):
                os.unlink(entry, dir_fd=fd)
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
