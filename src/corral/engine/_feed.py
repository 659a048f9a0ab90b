"""What a one-shot run is fed besides its code: stdin bytes and files in its working folder.

Checked here, once, against the run's limits, then carried in the run request
(``RunRequest.stdin`` and ``.files``) to the worker, which writes them before the code starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from corral import _fs
from corral._limits import Limits
from corral.errors import InvalidPath
from corral.sandbox import RunRequest

__all__ = ["MAX_FEED_BYTES", "MAX_FEED_FILES", "NO_FEED", "Feed", "check_feed", "fed"]

MAX_FEED_FILES = 256
"""Files one run may be given: each is a system call or three before the code starts."""
MAX_FEED_BYTES = 32 * 1024 * 1024
"""stdin and files of one run together: they travel base64 in one request frame."""


@dataclasses.dataclass(frozen=True, slots=True)
class Feed:
    """A one-shot run's stdin (None: EOF at once) and files for its working folder."""

    stdin: bytes | None = None
    files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        stdin: object = self.stdin  # typed bytes, but a caller without mypy may pass text
        if isinstance(stdin, bytearray | memoryview):
            object.__setattr__(self, "stdin", bytes(stdin))
        elif stdin is not None and not isinstance(stdin, bytes):
            kind = type(stdin).__name__
            raise TypeError(f"stdin must be bytes (encode text first), not {kind}")


NO_FEED = Feed()


def check_feed(stdin: bytes | None, files: Mapping[str, bytes], limits: Limits) -> str:
    """The reason stdin or files cannot be given to a run, or "" when they can."""
    if len(files) > MAX_FEED_FILES:
        return f"{len(files)} files; at most {MAX_FEED_FILES} may be given to one run"
    total = len(stdin or b"")
    for path, data in files.items():
        try:
            _fs.validate_relpath(path)
        except InvalidPath as exc:
            return f"file {path!r}: {exc}"
        if len(data) > limits.file_bytes:
            return f"file {path!r} has {len(data)} bytes; the limit is {limits.file_bytes}"
        total += len(data)
    # At most half the run's /work and /tmp, so the program keeps room of its own.
    bound = min(limits.work_bytes // 2, MAX_FEED_BYTES)
    if total > bound:
        return f"stdin and files add up to {total} bytes; the limit is {bound}"
    return ""


def fed(request: RunRequest, stdin: bytes | None, files: Mapping[str, bytes]) -> RunRequest:
    """``request`` carrying ``stdin`` and ``files`` (already checked by ``check_feed``)."""
    if stdin is None and not files:
        return request
    placed = tuple((str(_fs.validate_relpath(p)), d) for p, d in files.items())
    return dataclasses.replace(request, stdin=stdin, files=placed)
