"""Issue 8's hardening, tried from inside real workers: the allowlist, host identities, /proc.

Each test runs code in a real isolated worker and checks what it reports against what the
host (this test process) knows.
"""

from __future__ import annotations

import json
import os
import platform
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from corral._limits import Limits
from corral._uids import DEFAULT_UID_RANGE
from corral.engine import Engine
from corral.sandbox import SECCOMP_POLICY

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=10)
X86_64 = platform.machine() == "x86_64"


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=LIMITS) as started:
        yield started


async def probe(engine: Engine, code: str) -> Any:
    """Run ``code``, which prints one JSON document last, and return that document."""
    result = await engine.run(code, limits=LIMITS)
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr)
    return json.loads(result.stdout.splitlines()[-1])


_SYSCALL = (
    "import ctypes, json\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def errno_of(number, *args):\n"
    "    ctypes.set_errno(0)\n"
    "    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))\n"
    "    return ctypes.get_errno() if result == -1 else 0\n"
)


# the seccomp allowlist ----------------------------------------------------------------------


async def test_vsock_netlink_and_packet_sockets_are_refused(engine: Engine) -> None:
    families = {
        "vsock": int(socket.AF_VSOCK),
        "netlink": int(socket.AF_NETLINK),
        "packet": int(socket.AF_PACKET),
        "unix": int(socket.AF_UNIX),
        "inet": int(socket.AF_INET),
        "inet6": int(socket.AF_INET6),
    }
    seen = await probe(
        engine,
        "import errno, json, socket\n"
        f"families = {families!r}\n"
        "def attempt(family):\n"
        "    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):\n"
        "        try:\n"
        "            socket.socket(family, kind).close()\n"
        "            return 'opened'\n"
        "        except OSError as exc:\n"
        "            last = errno.errorcode[exc.errno]\n"
        "    return last\n"
        "pair = socket.socketpair(); pair[0].close(); pair[1].close()\n"
        "print(json.dumps({name: attempt(f) for name, f in families.items()}))",
    )
    assert seen["vsock"] == seen["netlink"] == seen["packet"] == "EAFNOSUPPORT", seen
    assert seen["unix"] == seen["inet"] == seen["inet6"] == "opened", seen


async def test_numbers_past_the_policy_answer_enosys(engine: Engine) -> None:
    numbers = [500, 1000, 4095, 99_999, 2**31 - 1]
    if X86_64:
        numbers.append(0x40000000 | 39)  # the x32 ABI's getpid
    seen = await probe(engine, _SYSCALL + f"print(json.dumps([errno_of(n) for n in {numbers!r}]))")
    assert seen == [38] * len(numbers)  # ENOSYS


async def test_refused_calls_answer_eperm_and_clone3_enosys(engine: Engine) -> None:
    calls = {"statmount": 457, "listmount": 458, "open_tree_attr": 467}
    if X86_64:
        calls |= {"ptrace": 101, "kexec_load": 246, "bpf": 321, "open_tree": 428, "mount": 165}
    seen = await probe(
        engine,
        _SYSCALL + "print(json.dumps({\n"
        f"  'refused': {{name: errno_of(nr) for name, nr in {calls!r}.items()}},\n"
        "  'clone3': errno_of(435, 0, 0),\n"
        + (
            "  'clone_newuser': errno_of(56, 0x10000000 | 17, 0, 0, 0, 0),\n"
            "  'clone_newnet': errno_of(56, 0x40000000 | 17, 0, 0, 0, 0),\n"
            if X86_64
            else ""
        )
        + "}))",
    )
    assert seen["refused"] == dict.fromkeys(calls, 1), seen  # EPERM
    assert seen["clone3"] == 38  # ENOSYS: glibc falls back to clone, whose flags are checked
    if X86_64:
        assert seen["clone_newuser"] == seen["clone_newnet"] == 1


async def test_the_libraries_work_under_the_allowlist(engine: Engine) -> None:
    seen = await probe(
        engine,
        "import json, subprocess, sys, threading, multiprocessing as mp\n"
        "import numpy as np, pandas as pd, matplotlib.pyplot as plt\n"
        "plt.plot([1, 2]); plt.savefig('p.png')\n"
        "with mp.Pool(2) as pool: squares = pool.map(abs, [-1, -2])\n"
        "out = subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True).stdout\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "print(json.dumps({'mp': squares, 'sub': out.decode(),\n"
        "  'np': float(np.linalg.inv(np.eye(3)).sum()), 'pd': int(pd.Series([1, 2]).sum())}))",
    )
    assert seen == {"mp": [1, 2], "sub": "7\n", "np": 3.0, "pd": 3}


def test_the_policy_is_data_with_a_reason_per_group() -> None:
    data = SECCOMP_POLICY.as_dict()
    assert data["default"] == "ENOSYS"
    allowed = SECCOMP_POLICY.allowed_names()
    assert {"read", "mmap", "clone", "socket", "futex", "execve"} <= allowed
    assert not allowed & {"ptrace", "mount", "bpf", "clone3", "statmount", "open_tree_attr"}
    for kind in ("allow", "eperm"):
        groups = data[kind]
        assert isinstance(groups, list)
        assert all(group["why"] and group["syscalls"] for group in groups)
    assert json.loads(json.dumps(data)) == data


# one host identity per worker ----------------------------------------------------------------


_OUTER_UID = "print(json.dumps(int(open('/proc/self/uid_map').read().split()[1])))"


async def test_concurrent_workers_and_sessions_have_their_own_host_uids(engine: Engine) -> None:
    sessions = [await engine.open_session(limits=LIMITS) for _ in range(2)]
    try:
        uids = []
        for session in sessions:
            result = await session.run("import json\n" + _OUTER_UID)
            assert result.outcome == "ok", result.stderr
            uids.append(int(result.stdout))
        # One-shot runs while both sessions live, two of them at once.
        async with anyio.create_task_group() as tg:
            for _ in range(2):

                async def one() -> None:
                    uids.append(await probe(engine, "import json\n" + _OUTER_UID))

                tg.start_soon(one)
    finally:
        for session in sessions:
            await session.close()
    assert len(set(uids[:2])) == 2, uids  # the live sessions differ
    assert not set(uids[:2]) & set(uids[2:]), uids  # no run shares a live session's uid
    first = DEFAULT_UID_RANGE.first
    assert all(first < uid < first + DEFAULT_UID_RANGE.count for uid in uids), uids
    assert 65534 not in uids


def _zygote_pids(engine: Engine) -> list[int]:
    hosts = engine._zygote_handles()
    return [host.pid for host in hosts.values() if host.pid is not None]


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as status:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in status)}


async def test_zygotes_are_non_dumpable_with_only_setuid_setgid_and_kill(engine: Engine) -> None:
    pids = _zygote_pids(engine)
    assert pids
    for pid in pids:
        status = _status(pid)
        real, effective, saved, _fs = (int(u) for u in status["Uid"].split())
        # While it clones a worker its effective uid is that worker's (the namespace owner).
        assert real == saved >= DEFAULT_UID_RANGE.first
        assert real <= effective < DEFAULT_UID_RANGE.first + DEFAULT_UID_RANGE.count
        kept = (1 << 5) | (1 << 6) | (1 << 7)  # CAP_KILL, CAP_SETGID, CAP_SETUID
        assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == kept
        assert int(status["CapBnd"], 16) == kept
        assert status["NoNewPrivs"] == "1"
        # A non-dumpable process's /proc files belong to root, whatever its own uid.
        assert os.stat(f"/proc/{pid}/environ").st_uid == 0


async def test_a_worker_cannot_see_another_workers_processes(engine: Engine) -> None:
    session = await engine.open_session(limits=LIMITS)
    try:
        result = await session.run("import os; os.getpid()")
        assert result.outcome == "ok"
        seen = await probe(
            engine,
            "import json, os\n"
            "print(json.dumps(sorted(p for p in os.listdir('/proc') if p.isdigit())))",
        )
    finally:
        await session.close()
    assert seen == ["1"]


# the host's traces in /proc ------------------------------------------------------------------


async def test_host_revealing_proc_files_are_masked(engine: Engine) -> None:
    seen = await probe(
        engine,
        "import json, os\n"
        "def read(path):\n"
        "    try:\n"
        "        return open(path, 'rb').read().decode('latin-1')\n"
        "    except OSError as exc:\n"
        "        return f'error {exc.errno}'\n"
        "pressure = {n: read(f'/proc/pressure/{n}') for n in os.listdir('/proc/pressure')}\n"
        "print(json.dumps({'cmdline': read('/proc/cmdline'),\n"
        "  'config': read('/proc/config.gz'), 'loadavg': read('/proc/loadavg'),\n"
        "  'boot_id': read('/proc/sys/kernel/random/boot_id'), 'pressure': pressure}))",
    )
    _check_masked(seen)


def _check_masked(seen: dict[str, Any]) -> None:
    assert seen["cmdline"] == ""
    if os.path.exists("/proc/config.gz"):
        assert seen["config"] == ""
    assert seen["loadavg"] == "0.00 0.00 0.00 1/1 1\n"
    with open("/proc/sys/kernel/random/boot_id") as boot_id:
        assert seen["boot_id"].strip() != boot_id.read().strip()
    assert len(seen["boot_id"].strip()) == 36
    if os.path.isdir("/proc/pressure"):
        assert set(seen["pressure"]) == set(os.listdir("/proc/pressure"))
        for text in seen["pressure"].values():
            assert "total=0" in text, text
            assert "avg10=0.00" in text, text


async def test_the_command_line_shows_nothing_of_corral(engine: Engine) -> None:
    code = (
        "import json, sys\n"
        "print(json.dumps({'cmdline': open('/proc/1/cmdline', 'rb').read().decode(),\n"
        "  'self': open('/proc/self/cmdline', 'rb').read().decode(),\n"
        "  'orig_argv': sys.orig_argv}))"
    )
    seen = await probe(engine, code)
    session = await engine.open_session(limits=LIMITS)
    try:
        result = await session.run(code)
        assert result.outcome == "ok", result.stderr
        in_session = json.loads(result.stdout)
    finally:
        await session.close()
    for observed in (seen, in_session):
        assert observed["cmdline"] == observed["self"] == "python3\0", observed
        assert observed["orig_argv"] == ["python3"]
    for pid in _zygote_pids(engine):
        assert await anyio.Path(f"/proc/{pid}/cmdline").read_bytes() == b"python3\0"
