"""Tenants do not share a host identity: one's fork bomb leaves another free to fork.

The bomb runs in a session, so it stays in force between runs while another run forks. Like
every hostile snippet it first proves from inside that it runs in corral's sandbox (its own
pid namespace, only its own few processes visible, hostname "corral") and refuses otherwise.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import AsyncIterator

import pytest

from corral._limits import Limits
from corral.engine import Engine

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=20, pids=24)
HOST_PID_NS = os.readlink("/proc/self/ns/pid")

SESSION_GUARD = f"""\
import os, socket
if (os.readlink('/proc/self/ns/pid') == {HOST_PID_NS!r}
        or len([p for p in os.listdir('/proc') if p.isdigit()]) > {LIMITS.pids + 4}
        or socket.gethostname() != 'corral'):
    raise RuntimeError('refusing to run hostile code outside the corral sandbox')
"""


def _hold_forks(most: int) -> str:
    """Fork and hold the children until the kernel refuses (or ``most`` are held); print how
    many were held and why the next was refused (None: it was not)."""
    return f"""\
import errno, json, os, signal
held, refused = [], None
while len(held) < {most}:
    try:
        pid = os.fork()
    except OSError as exc:
        refused = errno.errorcode[exc.errno]
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    held.append(pid)
print(json.dumps({{'held': len(held), 'errno': refused}}))
"""


BOMB = _hold_forks(10_000)
ONE_FORK = """\
import errno, json, os
try:
    pid = os.fork()
except OSError as exc:
    print(json.dumps(errno.errorcode[exc.errno]))
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print(json.dumps('forked'))
"""


COUNT_CHILDREN = """\
import json, os
print(json.dumps({'alive': len([p for p in os.listdir('/proc') if p.isdigit()])}))
"""

FORKS_LEFT = (
    _hold_forks(5) + "for pid in held:\n    os.kill(pid, signal.SIGKILL)\n    os.waitpid(pid, 0)\n"
)
"""How many more the bomber may fork (its children let go again)."""
TRANSIENT_TASKS = 2
"""Threads count against RLIMIT_NPROC too: a thread of the interpreter's (one that reads a
run's stdin, say) may have held a place when the bomb hit the limit and be gone since."""

SERVER_NPROC = 20
"""The server's own process budget (RLIMIT_NPROC, as systemd's LimitNPROC= sets it): below
the run's pids limit, so tenants sharing one host uid would run out of it together."""


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    # The zygote inherits the soft limit (root itself is exempt from it); raising a soft
    # limit back needs no privilege.
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    resource.setrlimit(resource.RLIMIT_NPROC, (SERVER_NPROC, hard))
    try:
        started = Engine(capacity=2, limits=LIMITS)
        await started.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
    try:
        yield started
    finally:
        await started.aclose()


async def test_one_workers_fork_bomb_does_not_stop_another_from_forking(engine: Engine) -> None:
    bomber = await engine.open_session(limits=LIMITS)
    try:
        bombed = await bomber.run(SESSION_GUARD + BOMB)
        assert bombed.outcome == "ok", (bombed.outcome, bombed.stderr)
        seen = json.loads(bombed.stdout)
        assert seen["errno"] == "EAGAIN"  # RLIMIT_NPROC of the bomber's own uid
        assert 0 < seen["held"] <= SERVER_NPROC

        other = await engine.run(ONE_FORK, limits=LIMITS)
        assert other.outcome == "ok", other.stderr
        assert json.loads(other.stdout) == "forked"
        other_session = await engine.open_session(limits=LIMITS)
        try:
            in_session = await other_session.run(ONE_FORK)
        finally:
            await other_session.close()
        assert json.loads(in_session.stdout) == "forked"

        still = await bomber.run(SESSION_GUARD + COUNT_CHILDREN + FORKS_LEFT)
        # The bomb was in force throughout: its processes all alive, its uid at its limit.
        alive, left = (json.loads(line) for line in still.stdout.splitlines()[-2:])
        assert alive["alive"] > seen["held"], (still.stdout, still.stderr, seen)
        assert left["errno"] == "EAGAIN", (still.stdout, still.stderr, seen)
        assert left["held"] <= TRANSIENT_TASKS, (still.stdout, seen)
    finally:
        await bomber.close()


async def test_uids_come_back_when_their_workers_are_gone() -> None:
    # Four uids per zygote: its own and three for workers, fewer than the runs below.
    first = 3_500_000
    async with Engine(capacity=1, limits=Limits(timeout=20), uid_range=(first, 8)) as small:
        seen = set()
        for _ in range(8):
            result = await small.run(
                "print(open('/proc/self/uid_map').read().split()[1])", limits=Limits(timeout=20)
            )
            assert result.outcome == "ok", (result.message, result.stderr)
            seen.add(int(result.stdout))
    assert seen <= set(range(first + 1, first + 8)) - {first + 4}  # never a zygote's own
