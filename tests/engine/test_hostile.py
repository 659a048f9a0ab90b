"""Hostile code is contained: the right outcome, within the deadline plus a small grace.

Every hostile snippet starts with GUARD, which proves from inside that it runs in corral's
sandbox (pid 1 of its own pid namespace, no other process visible, hostname "corral") and
raises before doing anything harmful otherwise. A broken engine that ran code on the host
would make these tests fail, never fork-bomb the machine.
"""

from __future__ import annotations

import os
import resource
import secrets
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

GUARD = """\
import os, socket
if (os.getpid() != 1
        or sorted(p for p in os.listdir('/proc') if p.isdigit()) != ['1']
        or socket.gethostname() != 'corral'):
    raise RuntimeError('refusing to run hostile code outside the corral sandbox')
print('sandbox confirmed', flush=True)
"""
CONFIRMED = "sandbox confirmed\n"
TIMEOUT = 1.5
GRACE = 2.0
"""Seconds past the deadline a contained run may take to end: a containment bound."""


HOSTILE_LIMITS = Limits(timeout=TIMEOUT)


async def hostile(
    engine: Engine, code: str, limits: Limits = HOSTILE_LIMITS
) -> tuple[ExecutionResult, float]:
    """Run guarded hostile code; return its result and the wall time it took."""
    started = time.perf_counter()
    with anyio.fail_after(limits.timeout + 10):
        result = await engine.run(GUARD + code, limits=limits)
    elapsed = time.perf_counter() - started
    assert result.stdout.startswith(CONFIRMED), (result.outcome, result.stdout, result.stderr)
    return result, elapsed


async def still_healthy(engine: Engine) -> None:
    result = await engine.run("print('healthy')", limits=Limits(timeout=10))
    assert (result.outcome, result.stdout) == ("ok", "healthy\n"), result.message
    assert engine.statistics().zygote_restarts == 0


def _descendants_of_workers(zygote: int) -> set[int]:
    """Host pids of processes started by this zygote's workers (not the workers themselves)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    # The command name may hold spaces; the parent pid follows its ")".
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    found = set()
    for pid in parents:
        chain = [pid]
        while chain[-1] in parents and chain[-1] != zygote and len(chain) < 64:
            chain.append(parents[chain[-1]])
        if chain[-1] == zygote and len(chain) > 2:  # pid -> ... -> worker -> zygote
            found.add(pid)
    return found


@pytest.fixture
async def no_leftovers(real_engine: Engine) -> AsyncIterator[None]:
    """Fail if a test leaves processes behind that its worker started."""
    zygotes = [host.pid for host in real_engine._zygote_handles().values() if host.pid is not None]
    assert zygotes

    def leftovers() -> set[int]:
        return set().union(*(_descendants_of_workers(zygote) for zygote in zygotes))

    assert leftovers() == set()
    yield
    with anyio.move_on_after(5):
        # The kernel tears a dead pid namespace down asynchronously; nothing signals it.
        while leftovers():  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert leftovers() == set(), "processes outlived their run"


def test_the_guard_refuses_outside_the_sandbox() -> None:
    # This very process is not pid 1 of an empty namespace: the guard must raise here.
    with pytest.raises(RuntimeError, match="refusing"):
        exec(GUARD, {})  # noqa: S102 - the guard is our own constant


@pytest.mark.usefixtures("no_leftovers")
async def test_fork_bomb_is_contained(real_engine: Engine) -> None:
    result, elapsed = await hostile(
        real_engine,
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    )
    assert result.outcome == "timeout", result.message
    assert elapsed < TIMEOUT + GRACE
    await still_healthy(real_engine)


async def test_memory_bomb_gives_memory_limit(real_engine: Engine) -> None:
    limits = Limits(timeout=10, memory_bytes=256 * 1024 * 1024)
    result, elapsed = await hostile(
        real_engine,
        "hoard = []\nwhile True:\n    hoard.append(bytearray(16 * 1024 * 1024))\n",
        limits,
    )
    assert result.outcome == "memory_limit", (result.outcome, result.message, result.stderr)
    assert result.status == "FAILURE"
    assert elapsed < limits.timeout + GRACE
    await still_healthy(real_engine)


async def test_numpy_memory_bomb_gives_memory_limit(real_engine: Engine) -> None:
    limits = Limits(timeout=10, memory_bytes=256 * 1024 * 1024)
    result, elapsed = await hostile(
        real_engine, "import numpy\nbig = numpy.ones(1 << 30, dtype=numpy.uint8)\n", limits
    )
    assert result.outcome == "memory_limit", (result.outcome, result.message, result.stderr)
    assert elapsed < limits.timeout + GRACE


@pytest.mark.parametrize(
    "loop",
    [
        pytest.param("while True:\n    pass\n", id="python-loop"),
        pytest.param("import itertools\nsum(itertools.repeat(0))\n", id="c-level-loop"),
        pytest.param(
            "import numpy\nm = numpy.ones((5000, 5000))\nm @ m\n", id="numpy-in-one-c-call"
        ),
        pytest.param(
            "import numpy\nm = numpy.random.rand(300, 300)\n"
            "while True:\n    m = m @ m\n    m /= m.max()\n",
            id="numpy-loop",
        ),
    ],
)
async def test_busy_loop_times_out(real_engine: Engine, loop: str) -> None:
    result, elapsed = await hostile(real_engine, loop)
    assert result.outcome == "timeout", (result.outcome, result.message, result.stderr)
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE


async def test_sleep_past_the_deadline_times_out(real_engine: Engine) -> None:
    result, elapsed = await hostile(real_engine, "import time\ntime.sleep(600)\n")
    assert result.outcome == "timeout"
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE
    assert str(TIMEOUT) in result.message or f"{TIMEOUT:g}" in result.message


async def test_ignored_signals_do_not_prevent_the_kill(real_engine: Engine) -> None:
    result, elapsed = await hostile(
        real_engine,
        "import signal\n"
        "for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM,\n"
        "            signal.SIGXCPU):\n"
        "    signal.signal(sig, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})\n"
        "while True:\n"
        "    try:\n"
        "        pass\n"
        "    except BaseException:\n"
        "        pass\n",
    )
    assert result.outcome == "timeout"
    assert TIMEOUT <= elapsed < TIMEOUT + GRACE
    await still_healthy(real_engine)


async def test_kill_every_process_reaches_only_its_own_namespace(real_engine: Engine) -> None:
    result, elapsed = await hostile(
        real_engine,
        "import subprocess\n"
        "child = subprocess.Popen(['sleep', '600'])\n"
        "os.kill(-1, 9)\n"
        "print('child', child.wait())\n"
        "print('survived')\n",
        Limits(timeout=10),
    )
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr)
    assert result.stdout == CONFIRMED + "child -9\nsurvived\n"
    assert elapsed < 10
    await still_healthy(real_engine)


@pytest.mark.usefixtures("no_leftovers")
async def test_a_daemonised_child_does_not_outlive_its_run(real_engine: Engine) -> None:
    name = f"daemon-{secrets.token_hex(4)}"
    result, _ = await hostile(
        real_engine,
        "import sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open('/proc/self/comm', 'w').write({name!r})\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "print('parent done')\n",
        Limits(timeout=10),
    )
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr)


async def test_segfault_gives_worker_error(real_engine: Engine) -> None:
    result, elapsed = await hostile(
        real_engine, "import ctypes\nctypes.string_at(0)\n", Limits(timeout=10)
    )
    assert result.outcome == "worker_error", (result.outcome, result.message)
    assert result.status == "FAILURE"
    assert elapsed < 10
    await still_healthy(real_engine)


async def test_abort_gives_worker_error(real_engine: Engine) -> None:
    result, _ = await hostile(real_engine, "os.abort()\n", Limits(timeout=10))
    assert result.outcome == "worker_error", (result.outcome, result.message)


async def test_oversized_frame_on_the_protocol_socket_gives_worker_error(
    real_engine: Engine,
) -> None:
    result, elapsed = await hostile(
        real_engine,
        "os.write(3, (0xFFFFFFF0).to_bytes(4, 'big') + b'J')\nimport time\ntime.sleep(600)\n",
        Limits(timeout=10),
    )
    assert result.outcome == "worker_error", (result.outcome, result.message)
    assert elapsed < 5  # refused from the header, not after the deadline


async def test_malformed_frame_on_the_protocol_socket_gives_worker_error(
    real_engine: Engine,
) -> None:
    result, elapsed = await hostile(
        real_engine,
        "junk = b'{not json'\n"
        "os.write(3, len(junk).to_bytes(4, 'big') + b'J' + junk)\n"
        "import time\ntime.sleep(600)\n",
        Limits(timeout=10),
    )
    assert result.outcome == "worker_error", (result.outcome, result.message)
    assert elapsed < 5


_ENDLESS_OUTPUT = (
    "import sys\nline = 'z' * 9999 + '\\n'\nwhile True:\n"
    "    sys.stdout.write(line)\n    sys.stderr.write(line)\n"
)


async def test_endless_output_ends_on_time_with_bounded_server_memory(real_engine: Engine) -> None:
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result, elapsed = await hostile(real_engine, _ENDLESS_OUTPUT)
    assert result.outcome == "timeout"
    assert elapsed < TIMEOUT + GRACE
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb
    assert grown_kb < 50 * 1024, f"the server's peak RSS grew by {grown_kb} kB"
    assert result.omitted["stdout"] > 0
    assert result.omitted["stderr"] > 0
    assert len(result.stdout) <= Limits().output_chars


async def test_a_killed_run_still_respects_both_output_bounds(real_engine: Engine) -> None:
    limits = Limits(timeout=TIMEOUT, output_chars=1000, output_bytes=1500)
    result, _ = await hostile(real_engine, _ENDLESS_OUTPUT, limits)
    assert result.outcome == "timeout"
    # The bounds hold for a killed run too, whatever the engine adds to explain it.
    chars = (len(result.stdout), len(result.stderr))
    total_bytes = len(result.stdout.encode()) + len(result.stderr.encode())
    assert max(chars) <= limits.output_chars, (chars, result.stderr[-120:])
    assert total_bytes <= limits.output_bytes, (total_bytes, result.stderr[-120:])
