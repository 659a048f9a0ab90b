"""What a followed process keeps for the streams attached to it (logic only; the SDK's tests
in test_sdk.py drive real processes)."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest

from corral.e2b._processes import MAX_ATTACHED, Process, TooManyAttached


class _Command:
    """The part of a Command that attaching and releasing use."""

    pid = 7
    closed = False

    def close(self) -> None:
        self.closed = True


def test_attachments_are_bounded_per_process() -> None:
    command = _Command()
    process = Process(cast(Any, command), "/bin/bash", [], {}, "/home/user", None)
    streams = [process.attach() for _ in range(MAX_ATTACHED)]
    with pytest.raises(TooManyAttached):
        process.attach()
    process.release()
    assert command.closed
    for stream in streams:
        with stream, pytest.raises(anyio.EndOfStream):
            stream.receive_nowait()  # released: each attached stream has ended
    # Attaching after the end gets an ended stream.
    with process.attach() as late, pytest.raises(anyio.EndOfStream):
        late.receive_nowait()
