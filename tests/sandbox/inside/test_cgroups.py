"""The zygote's reading of a cgroup's memory kill counter, from the kernel's own texts."""

from __future__ import annotations

import pytest

from corral.sandbox.inside._cgroups import _kill_count


@pytest.mark.parametrize(
    ("text", "kills"),
    [
        (b"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3),  # v1 memory.oom_control
        (b"low 0\nhigh 0\nmax 12\noom 2\noom_kill 7\noom_group_kill 0\n", 7),  # v2 memory.events
        (b"oom_kill 5\n", 5),
        (b"oom_kill 5", 5),
        (b"oom_kill_disable 1\nunder_oom 0\n", 0),  # a kernel without the field
        (b"oom_kill_disable 9\n", 0),
        (b"oom_kill x\n", 0),
        (b"", 0),
    ],
)
def test_the_kill_count_is_the_oom_kill_line_and_no_other(text: bytes, kills: int) -> None:
    assert _kill_count(text) == kills
