"""The zygote's reading of a cgroup's memory kill counter, from the kernel's own texts."""

from __future__ import annotations

import subprocess
import sys

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


def test_kept_cgroup_files_stay_within_half_the_zygotes_descriptor_limit() -> None:
    # In a child: a limit of 128 descriptors leaves 64 to kept files, 16 per cgroup of five
    # hierarchies (three files each and the kill counter): four cgroups kept.
    script = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))\n"
        "from corral.sandbox.inside._cgroups import CgroupFolders\n"
        "names = ['memory', 'pids', 'cpu', 'cpuacct', 'freezer']\n"
        "print(CgroupFolders(names, list(range(10, 15)))._max_kept)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "4"
