"""The holder's ``exec`` requests: anything malformed is refused before anything is forked."""

from __future__ import annotations

import os
from typing import Any

import pytest

from corral.sandbox.inside._command import MAX_COMMANDS, Commands

GOOD: dict[str, Any] = {
    "t": "exec",
    "argv": ["/bin/true"],
    "env": {"A": "1"},
    "cwd": "/home/user",
    "memory_bytes": 1 << 30,
    "cpu_seconds": 10,
}


@pytest.mark.parametrize(
    "change",
    [
        {"argv": []},
        {"argv": "/bin/true"},
        {"argv": ["/bin/tr\0ue"]},
        {"argv": [1]},
        {"env": {"A=B": "1"}},
        {"env": {"": "1"}},
        {"env": {"A": 1}},
        {"env": ["A"]},
        {"cwd": 3},
        {"memory_bytes": 0},
        {"memory_bytes": True},
        {"cpu_seconds": -1},
        {"cpu_seconds": "10"},
    ],
)
def test_malformed_requests_are_refused_without_forking(change: dict[str, Any]) -> None:
    commands = Commands(b"", {"pids": 1, "file_bytes": 1, "open_files": 8, "work_bytes": 1})
    (in_r, in_w), (out_r, out_w), (err_r, err_w), (status_r, status_w) = (
        os.pipe() for _ in range(4)
    )
    try:
        commands.start({**GOOD, **change}, [in_r, out_w, err_w, status_w], "/mnt/data")
        assert os.read(status_r, 64) == b"-1\n"
        assert os.read(status_r, 64) == b""  # the holder closed every descriptor it was given
        assert commands.reaped(12345, 0) is False  # nothing was started or recorded
    finally:
        for fd in (in_w, out_r, err_r, status_r):
            os.close(fd)


def test_there_is_a_ceiling_on_commands() -> None:
    assert 1 <= MAX_COMMANDS <= 64
