"""What a one-shot run is fed besides its code: stdin bytes and files in its working folder.

Checked here, once, against the run's limits, then carried in the run request (base64, since
the request is JSON) to the worker, which writes them before the code starts
(``corral.sandbox``'s feed).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from corral import _fs
from corral._limits import Limits
from corral.errors import InvalidPath

__all__ = ["check_feed", "feed_fields"]

MAX_FEED_FILES = 256
"""Files one run may be given: each is a system call or three before the code starts."""


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
    if total > limits.work_bytes // 2:
        # Half the run's /work and /tmp, so the program keeps room of its own.
        return f"stdin and files add up to {total} bytes; the limit is {limits.work_bytes // 2}"
    return ""


def feed_fields(stdin: bytes | None, files: Mapping[str, bytes]) -> dict[str, Any]:
    """The run request's ``stdin`` and ``files`` entries (absent when there is nothing)."""
    fields: dict[str, Any] = {}
    if files:
        fields["files"] = [
            {"path": str(_fs.validate_relpath(p)), "data": base64.b64encode(d).decode("ascii")}
            for p, d in files.items()
        ]
    if stdin is not None:
        fields["stdin"] = base64.b64encode(stdin).decode("ascii")
    return fields
