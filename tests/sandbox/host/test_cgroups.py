"""corral's cgroup tree: where it goes, what a sandbox's cgroup holds, and that it is gone after.

The discovery and the knobs are logic, tested on the mount tables of the hosts corral meets
(this one's v1 hybrid, a pure v2 host, one without a memory controller). The rest makes real
cgroups below the cgroup the test runs in, named corral's way, and removes them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from corral._limits import Limits
from corral.engine import Engine
from corral.errors import IsolationError
from corral.sandbox import CgroupTree, key_group
from corral.sandbox.host._cgroups import (
    RUNTIME_ALLOWANCE,
    SandboxCgroup,
    discover,
    memory_knobs,
)

_UNMAPPED_UID = 1_879_999_999  # no uid map of the test's user namespace holds it

HYBRID_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_OWN = """\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/53fc
2:cpuacct:/
1:cpu:/
0::/
"""


def test_a_v1_host_gives_one_hierarchy_per_controller_below_our_own_cgroups() -> None:
    found = {h.name: h for h in discover(mountinfo=HYBRID_MOUNTS, proc_cgroup=HYBRID_OWN)}
    assert set(found) == {"cpu", "cpuacct", "memory", "freezer", "pids"}
    assert found["memory"].path == "/sys/fs/cgroup/memory/process_api/53fc"
    assert found["pids"].path == "/sys/fs/cgroup/pids"
    assert {h.version for h in found.values()} == {1}


def test_co_mounted_v1_controllers_are_one_hierarchy() -> None:
    mounts = (
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    )
    own = "3:cpu,cpuacct:/a\n2:memory:/a\n"
    found = {h.name: h for h in discover(mountinfo=mounts, proc_cgroup=own)}
    assert found["cpu,cpuacct"].controllers == {"cpu", "cpuacct"}
    assert found["cpu,cpuacct"].path == "/sys/fs/cgroup/cpu,cpuacct/a"


def test_a_mount_of_part_of_a_hierarchy_maps_our_path_below_its_root() -> None:
    mounts = "35 31 0:32 /docker/x /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    found = discover(mountinfo=mounts, proc_cgroup="4:memory:/docker/x/app\n")
    assert found[0].path == "/sys/fs/cgroup/memory/app"


def test_a_v2_host_uses_the_unified_tree_where_it_offers_memory(tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mounts = f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw,nsdelegate\n"
    (found,) = discover(mountinfo=mounts, proc_cgroup="0::/srv\n")
    assert (found.version, found.path) == (2, str(tmp_path / "srv"))
    assert {"memory", "pids", "cpu"} <= found.controllers


def test_a_v2_cgroup_without_the_memory_controller_says_how_to_delegate(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("\n")
    mounts = f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    with pytest.raises(IsolationError, match="cgroup_parent"):
        discover(mountinfo=mounts, proc_cgroup="0::/\n")


def test_no_cgroup_file_system_is_a_clear_refusal() -> None:
    with pytest.raises(IsolationError, match="no cgroup hierarchy"):
        discover(mountinfo="1 0 0:1 / / rw - ext4 /dev/vda rw\n", proc_cgroup="")


def test_v1_memory_knobs_keep_memory_below_memory_and_swap_at_every_step() -> None:
    down = [name for name, _ in memory_knobs(1, 100, current=200)]
    up = [name for name, _ in memory_knobs(1, 300, current=200)]
    assert down[:2] == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    assert up[:2] == ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]
    assert dict(memory_knobs(2, 100)) == {"memory.max": "100", "memory.swap.max": "0"}


@pytest.mark.anyio
async def test_a_primed_cgroup_counts_the_run_from_the_reading_taken_while_it_waited(
    tmp_path: Path,
) -> None:
    memory, cpuacct = tmp_path / "memory", tmp_path / "cpuacct"
    memory.mkdir()
    cpuacct.mkdir()

    def counters(kills: int, cpu_ns: int) -> None:
        (memory / "memory.oom_control").write_text(f"oom_kill_disable 0\noom_kill {kills}\n")
        (cpuacct / "cpuacct.usage").write_text(f"{cpu_ns}\n")

    cgroup = SandboxCgroup(
        {"memory": str(memory), "cpuacct": str(cpuacct)}, 1, memory_bytes=1 << 28, pids=64
    )
    counters(kills=2, cpu_ns=1_000)  # a reused cgroup's past, and the worker's start-up
    cgroup.prime()
    counters(kills=2, cpu_ns=1_500)  # what the run itself does from here
    cgroup.begin_run()  # keeps the primed reading
    counters(kills=3, cpu_ns=4_000)
    assert await cgroup.end_run() == (1, 3_000)
    cgroup.begin_run()  # the next run reads afresh
    counters(kills=3, cpu_ns=4_500)
    assert await cgroup.end_run() == (0, 500)


def test_a_keys_group_is_stable_and_says_nothing_of_the_key() -> None:
    group = key_group("alice's key")
    assert group == key_group("alice's key") != key_group("bob")
    assert group.startswith("k-")
    assert "alice" not in group
    assert group[2:].isalnum()
    assert group[2:].isascii()


def _hierarchies() -> list[str]:
    try:
        return [h.path for h in discover()]
    except IsolationError as exc:
        pytest.skip(f"no cgroups here: {exc}")


def _knob(folder: str, name: str) -> str:
    return Path(folder, name).read_text().strip()


def _folders(paths: Iterable[str]) -> int:
    return sum(os.path.isdir(path) for path in paths)


@pytest.mark.isolation
def test_a_tree_a_dead_engine_left_is_swept_and_a_live_ones_is_not() -> None:
    parents = _hierarchies()
    pids = next(p for p in parents if p.endswith("/pids"))
    dead = next(pid for pid in range(4_194_000, 4_194_300) if not os.path.exists(f"/proc/{pid}"))
    stale = Path(pids) / f"corral-{dead}-1"
    (stale / "z5" / "w6").mkdir(parents=True)
    live = Path(pids) / f"corral-{os.getpid()}-999999"
    live.mkdir()
    try:
        tree = CgroupTree.create(capacity=1)
        tree.close()
        assert not stale.exists()
        assert live.exists()
    finally:
        for path in (stale / "z5" / "w6", stale / "z5", stale, live):
            if path.exists():
                path.rmdir()


@pytest.mark.isolation
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_a_corral_without_rights_over_a_dead_engines_tree_leaves_it_quietly() -> None:
    # As a corral in a user namespace of its own meets what a killed engine left: the
    # zygote's folder belongs to a uid it cannot map, so it may not remove what is below.
    parents = _hierarchies()
    pids = next(p for p in parents if p.endswith("/pids"))
    dead = next(pid for pid in range(4_194_300, 4_194_600) if not os.path.exists(f"/proc/{pid}"))
    stale = Path(pids) / f"corral-{dead}-1"
    (stale / "z5" / "w6").mkdir(parents=True)
    os.chown(stale / "z5", _UNMAPPED_UID, _UNMAPPED_UID)
    script = "from corral.sandbox import CgroupTree; CgroupTree.create(capacity=1).close()"
    try:
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert (stale / "z5" / "w6").exists()
        CgroupTree.create(capacity=1).close()  # one with the rights sweeps it
        assert not stale.exists()
    finally:
        for path in (stale / "z5" / "w6", stale / "z5", stale):
            if path.exists():
                path.rmdir()


@pytest.mark.isolation
@pytest.mark.anyio
async def test_each_sandbox_has_its_limits_and_the_tree_is_gone_after_the_engine() -> None:
    _hierarchies()
    limits = Limits(timeout=10, memory_bytes=300 << 20, pids=40)
    async with Engine(capacity=1, limits=limits, lean=False, sandbox_cpu_quota=0.5) as engine:
        tree = engine._cgroups
        assert tree is not None, engine.cgroups_status
        assert _folders(tree.roots.values()) == len(tree.roots)
        pool = engine._pool
        assert pool is not None
        worker = await pool.take()
        try:
            cgroup = worker.cgroup
            assert cgroup is not None
            paths = cgroup.paths
            wall = (300 << 20) + RUNTIME_ALLOWANCE
            assert _knob(paths["memory"], "memory.limit_in_bytes") == str(wall)
            assert _knob(paths["pids"], "pids.max") == "40"
            assert _knob(paths["cpu"], "cpu.cfs_quota_us") == "50000"
            assert worker.pid in cgroup.processes()
            cgroup.fit(memory_bytes=100 << 20, pids=8)
            wall = (100 << 20) + RUNTIME_ALLOWANCE
            assert _knob(paths["memory"], "memory.limit_in_bytes") == str(wall)
            assert _knob(paths["pids"], "pids.max") == "8"
        finally:
            worker.close()
        async with await engine.open_session(tenant="alice") as session:
            result = await session.run("print(1)")
            assert result.outcome == "ok"
            holder_paths = session._interpreter.holder.cgroup
            assert holder_paths is not None
            assert f"/{key_group('alice')}/" in holder_paths.paths["cpu"]
    assert _folders(tree.roots.values()) == 0
