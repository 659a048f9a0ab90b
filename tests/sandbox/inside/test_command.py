"""The holder's commands: a request is refused whole before anything is forked."""

from __future__ import annotations

import os

from corral.sandbox._control_protocol import Exec, StaticLimits
from corral.sandbox.inside._command import MAX_COMMANDS, Commands

STATIC = StaticLimits(work_bytes=1, pids=1, file_bytes=1, open_files=8)
GOOD = Exec(argv=("/bin/true",), env={}, cwd="/home/user", memory_bytes=1 << 30, cpu_seconds=10)


def test_an_exec_without_its_four_descriptors_forks_nothing_and_closes_them() -> None:
    commands = Commands(b"", STATIC)
    (in_r, in_w), (status_r, status_w) = os.pipe(), os.pipe()
    try:
        commands.start(GOOD, [in_r, status_w], "/mnt/data")
        assert os.read(status_r, 64) == b""  # the holder closed every descriptor it was given
        assert commands.reaped(12345, 0) is False  # nothing was started or recorded
    finally:
        for fd in (in_w, status_r):
            os.close(fd)


def test_there_is_a_ceiling_on_commands() -> None:
    assert 1 <= MAX_COMMANDS <= 64
