"""The process settings a case starts with: in a scratch process, then from a real case that
changes its server's (pid 1's) through the engine's case servers (``Engine.run_cases``)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from corral.engine import Engine
from tests.sandbox.inside.casekit import attack_then_observe
from tests.sandbox.kernel import autogroups_in_force

pytestmark = [pytest.mark.anyio]

_IN_A_SCRATCH_PROCESS = """\
import json, os, resource
from corral.sandbox.inside import _pristine
pristine = _pristine.capture()
unchanged = not _pristine.changed(pristine)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (12, hard))
os.setpriority(os.PRIO_PROCESS, 0, 5)
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
seen = _pristine.changed(pristine)
_pristine.apply(pristine)  # as root: the nice value may come down again
print(json.dumps([unchanged, seen, not _pristine.changed(pristine),
                  resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)]))
"""


def _can_lower_nice() -> bool:
    """Whether a process here may lower its nice value again: root of the host's user
    namespace (CAP_SYS_NICE there), not root of a namespace of its own."""
    probe = (
        "import os\nos.setpriority(os.PRIO_PROCESS, 0, 1)\nos.setpriority(os.PRIO_PROCESS, 0, 0)"
    )
    return (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False).returncode
        == 0
    )


@pytest.mark.skipif(not _can_lower_nice(), reason="lowering a nice value again takes CAP_SYS_NICE")
def test_apply_sets_back_what_changed_notices() -> None:
    # Its own process: the test process keeps its limits and scheduling.
    done = subprocess.run(
        [sys.executable, "-c", _IN_A_SCRATCH_PROCESS],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(done.stdout) == [True, True, True, True]


# from a real case ---------------------------------------------------------------------------

OBSERVE = (
    "{'own': [os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0),"
    " sorted(os.sched_getaffinity(0)),"
    " {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource)"
    "  if n.startswith('RLIMIT_') and n not in ('RLIMIT_AS', 'RLIMIT_CPU')}],"
    " 'server': [os.getpriority(os.PRIO_PROCESS, 1), os.sched_getscheduler(1),"
    " sorted(os.sched_getaffinity(1)),"
    " {n: resource.prlimit(1, getattr(resource, n)) for n in dir(resource)"
    "  if n.startswith('RLIMIT_')}, sched_attr(1)]}"
)
"""The case's own nice value, policy, affinity and limits (those its run does not set from its
memory and CPU use), and its server's: what a case after an attack must find as before."""

SCHED_ATTR = """\
import ctypes, resource, struct
_SCHED_ATTR = struct.Struct('=IIQiIQQQII')
_SCHED_GETATTR, _SCHED_SETATTR = {numbers}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def sched_attr(pid):
    buffer = ctypes.create_string_buffer(_SCHED_ATTR.size)
    if _libc.syscall(_SCHED_GETATTR, pid, buffer, _SCHED_ATTR.size, 0) != 0:
        raise OSError(ctypes.get_errno(), 'sched_getattr')
    return list(_SCHED_ATTR.unpack(buffer.raw)[1:])
def set_sched_attr(pid, fields):
    buffer = ctypes.create_string_buffer(_SCHED_ATTR.pack(_SCHED_ATTR.size, *fields))
    if _libc.syscall(_SCHED_SETATTR, pid, buffer, 0) != 0:
        raise OSError(ctypes.get_errno(), 'sched_setattr')
"""
_SCHED_NUMBERS = {"x86_64": (315, 314), "aarch64": (275, 274)}

# sched_setattr flags and fields (include/uapi/linux/sched/types.h)
_KEEP_POLICY_AND_PARAMS = 0x08 | 0x10
_UTIL_CLAMP_MIN = 0x20
SLICE_NS = 3_000_000
"""A custom time slice for pid 1 (Linux 6.12's EEVDF slice request)."""

SETTINGS_ATTACKS = {
    "nice 19": "os.setpriority(os.PRIO_PROCESS, 1, 19)",
    "SCHED_IDLE": "os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))",
    "SCHED_BATCH": "os.sched_setscheduler(1, os.SCHED_BATCH, os.sched_param(0))",
    "reset on fork": (
        "os.sched_setscheduler(1, os.SCHED_OTHER | os.SCHED_RESET_ON_FORK, os.sched_param(0))"
    ),
    "affinity": "os.sched_setaffinity(1, {min(os.sched_getaffinity(1))})",
    "time slice": f"set_sched_attr(1, [0, 0, 0, 0, {SLICE_NS}, 0, 0, 0, 0])",
    "utilisation clamp": (
        f"set_sched_attr(1, [0, {_KEEP_POLICY_AND_PARAMS | _UTIL_CLAMP_MIN}, 0, 0, 0, 0, 0,"
        " 1024, 1024])"
    ),
    "NOFILE (12, 12)": "resource.prlimit(1, resource.RLIMIT_NOFILE, (12, 12))",
    "FSIZE (10, 10)": "resource.prlimit(1, resource.RLIMIT_FSIZE, (10, 10))",
    "soft NOFILE only": (
        "resource.prlimit(1, resource.RLIMIT_NOFILE,"
        " (12, resource.prlimit(1, resource.RLIMIT_NOFILE)[1]))"
    ),
    "NPROC (1, 1)": "resource.prlimit(1, resource.RLIMIT_NPROC, (1, 1))",
    "STACK": "resource.prlimit(1, resource.RLIMIT_STACK, (1 << 20, 1 << 20))",
}
NEEDS = {
    "affinity": "two CPUs to pin pid 1 to one of",
    "time slice": "a kernel that takes custom time slices (Linux 6.12)",
    "utilisation clamp": "a kernel with CONFIG_UCLAMP_TASK",
}
"""What the host must offer for an attack to change anything; without it the test skips."""


@pytest.mark.isolation
@pytest.mark.skipif(os.uname().machine not in _SCHED_NUMBERS, reason="sched_getattr's number")
@pytest.mark.parametrize("name", SETTINGS_ATTACKS)
async def test_a_case_that_changes_its_servers_settings_gets_a_fresh_server(
    one_lane: Engine, name: str
) -> None:
    attack = (
        "try:\n"
        f"    {SETTINGS_ATTACKS[name]}\n"
        "    did = 'ok'\n"
        "except OSError as exc:\n"
        "    did = exc.errno\n"
    )
    prelude = SCHED_ATTR.format(numbers=_SCHED_NUMBERS[os.uname().machine])
    seen = await attack_then_observe(one_lane, OBSERVE, attack, prelude=prelude)
    did = seen[0].attack
    if name in NEEDS and did in (errno.EINVAL, errno.EOPNOTSUPP, errno.E2BIG):
        pytest.skip(f"needs {NEEDS[name]}")
    if name == "affinity" and len(seen[0].observed["server"][2]) < 2:
        pytest.skip(f"needs {NEEDS[name]}")
    assert did == "ok"  # the case could change pid 1 ...
    # ... and the next case ran on a new server, which then served the one after it, each
    # starting from the settings the first case found.
    servers = [s.server for s in seen]
    assert servers[1] != servers[0]
    assert servers[2] == servers[1]
    assert [s.observed for s in seen[1:]] == [seen[0].observed] * 2


@pytest.mark.isolation
async def test_a_case_that_renices_its_autogroup_renices_only_its_own(one_lane: Engine) -> None:
    # /proc/self/autogroup is writable by its process: a case in its server's session would
    # raise the nice value of the server's autogroup, and so of every later case.
    autogroups_in_force()
    nice = "open('/proc/self/autogroup').read().split()[-1]"
    attack = f"open('/proc/self/autogroup', 'w').write('19')\ndid = {nice}"
    seen = await attack_then_observe(one_lane, nice, attack)
    assert seen[0].attack == "19"
    assert [s.observed for s in seen] == ["0"] * 3
    assert [s.server for s in seen] == [seen[0].server] * 3  # nothing of the server's changed
