"""Every wall holds for a sandbox as a whole: memory, kernel memory, processes, CPU.

A run, a session and what they start share one cgroup: forking past a memory limit, filling
a tmpfs with empty files or user xattrs, leaving busy loops behind, or lifting the CPU limit
is bounded for all of the sandbox together. Each test is capped so that even a broken wall
costs the host at most about 600 MB, and each hostile program first proves from inside that
it runs in corral's sandbox (``GUARD``). Without cgroups (not root, no memory controller)
the tests that need them skip and say why.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine
from corral.sandbox.inside._isolate import BYTES_PER_INODE
from tests.engine.test_hostile import CONFIRMED, GUARD

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

_MIB = 1 << 20
WALL = Limits(timeout=20, memory_bytes=256 * _MIB)
HOST_PID_NS = os.readlink("/proc/self/ns/pid")
SESSION_GUARD = f"""\
import os, socket
if (os.readlink('/proc/self/ns/pid') == {HOST_PID_NS!r}
        or len([p for p in os.listdir('/proc') if p.isdigit()]) > 4
        or socket.gethostname() != 'corral'):
    raise RuntimeError('refusing to run hostile code outside the corral sandbox')
print('sandbox confirmed', flush=True)
"""


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=Limits(timeout=20)) as started:
        if not started.cgroups_status.startswith("v"):
            pytest.skip(f"cgroups are {started.cgroups_status}")
        yield started


# Three children that each fill 200 MB and hold it until the parent has heard from all:
# 600 MB in all, past a 256 MB wall for the whole sandbox (each alone is under it, so no
# per-process limit stops them). A child the kernel kills never reports.
FORKS = """
import os
held = []
for _ in range(3):
    ready, go = os.pipe(), os.pipe()
    if os.fork() == 0:
        os.close(ready[0])
        block = bytearray(200 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        os.write(ready[1], b"+")
        os.read(go[0], 1)
        os._exit(0)
    os.close(ready[1])  # the child's: EOF once it is gone, reported or killed
    held.append((ready[0], go[1]))
reported = sum(len(os.read(ready, 1)) for ready, _ in held)
for _, go in held:
    os.write(go, b"x")
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print("held", reported)
"""


async def test_forks_past_the_memory_limit_of_a_run_meet_one_wall(engine: Engine) -> None:
    with anyio.fail_after(60):
        result = await engine.run(GUARD + FORKS, limits=WALL)
    assert result.stdout.startswith(CONFIRMED), result.stderr
    assert result.outcome == "memory_limit", (result.outcome, result.stdout, result.stderr)
    assert "held 3" not in result.stdout
    assert "256 MiB" in result.message


async def test_a_reused_cgroup_counts_only_its_own_workers_kills(engine: Engine) -> None:
    # The zygote keeps a reaped worker's empty cgroup for the next: a run after an out of
    # memory one, in the same cgroup or not, is not called out of memory.
    with anyio.fail_after(60):
        killed = await engine.run(GUARD + FORKS, limits=WALL)
    assert killed.outcome == "memory_limit", (killed.outcome, killed.stdout)
    for _ in range(2 * engine.capacity + 4):  # past the pool: its cgroups are spares
        after = await engine.run("print('fine')", limits=WALL)
        assert (after.outcome, after.stdout) == ("ok", "fine\n"), after.message
    tree = engine._cgroups
    assert tree is not None

    def spares() -> list[str]:
        return [
            name
            for root in tree.roots.values()
            for _, folders, _ in os.walk(root)
            for name in folders
            if name.startswith("spare-")
        ]

    # The last worker's cgroup is kept once the zygote has reaped it (after the engine hung
    # up), and no spawn takes it while the pool is full.
    with anyio.fail_after(10):
        while not spares():  # noqa: ASYNC110 - a condition poll: a reap announces nothing
            await anyio.sleep(0.02)


async def test_forks_past_the_memory_limit_of_a_session_meet_one_wall(engine: Engine) -> None:
    async with await engine.open_session(limits=WALL, tenant="walls") as session:
        with anyio.fail_after(60):
            result = await session.run(SESSION_GUARD + FORKS)
        assert result.stdout.startswith(CONFIRMED), result.stderr
        assert result.outcome == "memory_limit", (result.outcome, result.stdout)
        assert "held 3" not in result.stdout
        # The session lives on: the kernel killed processes, never its holder.
        after = await session.run("print('still here')")
        assert (after.outcome, after.stdout) == ("ok", "still here\n"), after.stderr


async def test_a_run_under_its_memory_limit_is_not_called_out_of_memory(engine: Engine) -> None:
    result = await engine.run("b = bytearray(100 << 20)\nprint(len(b) >> 20)", limits=WALL)
    assert (result.outcome, result.stdout) == ("ok", "100\n"), result.stderr


INODES = (
    GUARD
    + """
import os
made = 0
try:
    while made < 1_000_000:
        open(f"/tmp/f{made}", "x").close()
        made += 1
except OSError as exc:
    print("stopped:", exc.strerror)
print("made", made)
"""
)


async def test_an_inode_flood_stops_at_its_file_systems_bound(engine: Engine) -> None:
    with anyio.fail_after(60):
        result = await engine.run(INODES)
    assert result.stdout.startswith(CONFIRMED), result.stderr
    made = int(result.stdout.rsplit("made ", 1)[1])
    bound = engine.limits.work_bytes // BYTES_PER_INODE
    assert "stopped: No space left on device" in result.stdout
    assert bound // 2 < made <= bound  # a bound in proportion to /tmp's size, not ~3 M


XATTRS = (
    GUARD
    + """
import os
stored = 0
value = b"x" * 60_000
try:
    for n in range(100_000):
        path = f"/tmp/x{n}"
        open(path, "x").close()
        os.setxattr(path, "user.fill", value)
        stored += len(value)
except OSError as exc:
    print("stopped:", exc.strerror)
print("stored", stored)
"""
)


async def test_an_xattr_flood_is_bounded_with_its_file_system(engine: Engine) -> None:
    with anyio.fail_after(60):
        result = await engine.run(XATTRS)
    assert result.stdout.startswith(CONFIRMED), result.stderr
    stored = int(result.stdout.rsplit("stored ", 1)[1])
    assert "stopped:" in result.stdout
    # The kernel counts 1 KiB of xattr room per inode: /tmp's share, never gigabytes.
    room = engine.limits.work_bytes // BYTES_PER_INODE * 1024
    assert stored <= room, (stored, room)


LIFT_CPU = """
import resource
try:
    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("lifted")
except (ValueError, OSError) as exc:
    print("refused:", type(exc).__name__)
print(resource.getrlimit(resource.RLIMIT_CPU)[1] != resource.RLIM_INFINITY)
"""


async def test_the_cpu_limit_cannot_be_lifted_in_a_run_or_a_session(engine: Engine) -> None:
    one_shot = await engine.run(LIFT_CPU)
    assert one_shot.stdout == "refused: ValueError\nTrue\n", one_shot.stderr
    async with await engine.open_session(tenant="walls") as session:
        inside = await session.run(LIFT_CPU)
    assert inside.stdout == "refused: ValueError\nTrue\n", inside.stderr


BUSY_LOOPS = """
import subprocess, sys
loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
print(len(loops))
"""
# The other tenant's run: a second of CPU, and the wall time it took to get it.
SHARE = """
import time
wall, cpu = time.perf_counter(), time.process_time()
while time.process_time() - cpu < 1.0:
    pass
print(time.perf_counter() - wall)
"""


async def test_background_busy_loops_share_the_cpu_fairly_with_another_keys_runs(
    engine: Engine,
) -> None:
    async with await engine.open_session(tenant="noisy") as noisy:
        started = await noisy.run(BUSY_LOOPS)
        assert (started.outcome, started.stdout) == ("ok", "4\n"), started.stderr
        stats = engine.statistics()
        assert stats.background_by_tenant == {"noisy": 4}
        assert stats.running == 0  # the loops hold no run slot, and are counted all the same
        before, window = stats.cpu_seconds_by_tenant["noisy"], time.perf_counter()
        with anyio.fail_after(60):
            quiet = await engine.run(SHARE, tenant="quiet")
        window = time.perf_counter() - window
        noisy_rate = (engine.statistics().cpu_seconds_by_tenant["noisy"] - before) / window
        assert quiet.outcome == "ok", quiet.stderr
        quiet_rate = 1.0 / float(quiet.stdout)
        # Per process, the four loops would get four times the run's CPU; per sandbox they
        # share one weight, so the two tenants get about as much (whatever else loads the
        # host scales both alike).
        assert noisy_rate < 2 * quiet_rate, (noisy_rate, quiet_rate)
    assert engine.statistics().cpu_seconds_by_tenant["noisy"] > before  # kept after the close


async def test_the_pids_wall_holds_for_the_whole_sandbox(engine: Engine) -> None:
    code = (
        GUARD
        + """
import os, time
children = 0
try:
    while children < 500:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
except OSError as exc:
    print("stopped:", exc.strerror)
print("children", children)
"""
    )
    started = time.perf_counter()
    with anyio.fail_after(60):
        result = await engine.run(code, limits=Limits(timeout=10, pids=32))
    assert result.stdout.startswith(CONFIRMED), result.stderr
    children = int(result.stdout.rsplit("children ", 1)[1])
    assert children < 32, result.stdout
    assert time.perf_counter() - started < 30  # the sleepers died with the run


WAITS_FOR_GO = """
import os, time
while not os.path.exists("go"):
    time.sleep(0.01)
"""


async def test_session_runs_that_wait_take_no_capacity_slot(engine: Engine) -> None:
    # Capacity is two: three sessions wait on a file at once, and a one-shot run still starts.
    sessions = [await engine.open_session(tenant=f"waiter-{i}") for i in range(3)]
    try:
        async with anyio.create_task_group() as tg:
            for session in sessions:
                tg.start_soon(session.run, WAITS_FOR_GO)
            with anyio.fail_after(30):
                while engine.statistics().scheduler.session_runs < 3:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # a condition poll: a run announces nothing
            stats = engine.statistics()
            assert (stats.running, stats.queued) == (0, 0)
            with anyio.fail_after(30):
                beside = await engine.run("6 * 7")
            assert beside.result == {"text/plain": "42"}
            for session in sessions:
                await session.put_file("go", b"")
        assert engine.statistics().scheduler.session_runs == 0
    finally:
        for session in sessions:
            await session.close()
