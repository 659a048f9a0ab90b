"""What a worker can see and do: real workers, never a mocked sandbox.

Each test runs code in a real isolated worker and has it report what it observes, then checks
that against what the host (this test process) knows is there.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import corral
from corral._limits import Limits
from corral.engine import Engine, Input, RunEvent
from corral.sandbox import DENIED_SYSCALLS
from tests.sandbox.kernel import autogroups_in_force

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

REPO = Path(__file__).resolve().parents[2]
LIMITS = Limits(timeout=10)
SECRET_NAME = f"SERVER_SECRET_{secrets.token_hex(4).upper()}"
SECRET_VALUE = f"do-not-leak-{secrets.token_hex(16)}"


ONE_RUN: dict[str, Any] = {"pool_size": 0, "prewarm": False, "lean": False, "preload": ()}
"""The engine ``corral run`` starts: no spare worker, nothing loaded or warmed up ahead."""


@pytest.fixture(scope="module", params=["server", "corral-run"])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    # Every test on both engines: what corral run leaves out for speed must not be isolation.
    # The secret is in the server's environment before the zygote starts, as a real
    # deployment's API keys would be.
    shape = ONE_RUN if request.param == "corral-run" else {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SECRET_NAME, SECRET_VALUE)
        async with Engine(capacity=2, limits=LIMITS, **shape) as started:
            yield started


async def probe(engine: Engine, code: str, limits: Limits = LIMITS) -> Any:
    """Run ``code``, which prints one JSON document last, and return that document."""
    result = await engine.run(code, limits=limits)
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr)
    return json.loads(result.stdout.splitlines()[-1])


# who the worker is --------------------------------------------------------------------------


async def test_worker_is_unprivileged_init_of_its_own_namespaces(engine: Engine) -> None:
    seen = await probe(
        engine,
        "import json, os, socket\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status').read()"
        ".splitlines())\n"
        "status = {k: v.strip() for k, v in status.items()}\n"
        "print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),\n"
        "  'groups': os.getgroups(), 'pid': os.getpid(), 'ppid': os.getppid(),\n"
        "  'hostname': socket.gethostname(), 'status': status,\n"
        "  'pids': sorted(p for p in os.listdir('/proc') if p.isdigit())}))",
    )
    assert os.geteuid() == 0 or seen["uid"] != 0  # the point: root outside, 1000 inside
    assert (seen["uid"], seen["euid"], seen["gid"]) == (1000, 1000, 1000)
    assert seen["groups"] == []
    status = seen["status"]
    assert status["Uid"].split() == ["1000"] * 4
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capabilities], 16) == 0, capabilities
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
    assert (seen["pid"], seen["ppid"]) == (1, 0)
    assert seen["pids"] == ["1"]
    assert seen["hostname"] == "corral"


async def test_seccomp_denies_namespace_mount_and_ptrace_calls(engine: Engine) -> None:
    assert {"mount", "unshare", "setns", "ptrace", "bpf", "keyctl"} <= set(DENIED_SYSCALLS)
    seen = await probe(
        engine,
        "import ctypes, json\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def errno_of(result):\n"
        "    return ctypes.get_errno() if result == -1 else 0\n"
        "print(json.dumps({\n"
        "  'unshare_user': errno_of(libc.unshare(0x10000000)),\n"
        "  'unshare_net': errno_of(libc.unshare(0x40000000)),\n"
        "  'mount': errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
        "  'ptrace': errno_of(libc.ptrace(16, 1, None, None)),\n"
        "}))",
    )
    assert seen == {"unshare_user": 1, "unshare_net": 1, "mount": 1, "ptrace": 1}  # EPERM


async def test_rlimits_follow_the_requested_limits(engine: Engine) -> None:
    limits = Limits(timeout=10, pids=32, open_files=100, file_bytes=1 << 20)
    seen = await probe(
        engine,
        "import json, resource\n"
        "print(json.dumps({\n"
        "  'nproc': resource.getrlimit(resource.RLIMIT_NPROC)[0],\n"
        "  'nofile': resource.getrlimit(resource.RLIMIT_NOFILE)[0],\n"
        "  'fsize': resource.getrlimit(resource.RLIMIT_FSIZE)[0],\n"
        "  'cpu': resource.getrlimit(resource.RLIMIT_CPU)[0],\n"
        "  'core': resource.getrlimit(resource.RLIMIT_CORE)[1],\n"
        "}))",
        limits,
    )
    assert (seen["nproc"], seen["nofile"], seen["fsize"]) == (32, 100, 1 << 20)
    assert seen["core"] == 0
    assert 0 < seen["cpu"] <= limits.timeout + 2
    result = await engine.run("open('big.bin', 'wb').write(b'x' * (2 << 20))", limits=limits)
    assert result.outcome == "python_error"  # RLIMIT_FSIZE: EFBIG, not a dead worker
    assert result.error is not None
    assert result.error.type == "OSError"


async def test_work_size_follows_the_requested_limit(engine: Engine) -> None:
    limits = Limits(timeout=10, work_bytes=8 << 20)
    seen = await probe(
        engine,
        "import json, os\n"
        "print(json.dumps([os.statvfs(p).f_blocks * os.statvfs(p).f_frsize\n"
        "                  for p in ('/work', '/tmp')]))",
        limits,
    )
    assert seen == [8 << 20, 8 << 20]


async def test_only_standard_streams_and_the_protocol_socket_are_open(engine: Engine) -> None:
    seen = await probe(
        engine,
        "import json, os\n"
        "fds = os.listdir('/proc/self/fd')\n"  # the fd listdir used is closed by now
        "print(json.dumps(sorted(int(fd) for fd in fds if os.path.exists(f'/proc/self/fd/{fd}'))))",
    )
    assert seen == [0, 1, 2, 3]


# fresh state ------------------------------------------------------------------------------


async def test_state_from_one_run_is_absent_in_the_next(engine: Engine) -> None:
    first = await engine.run(
        "import builtins, json, numpy, sys\n"
        "leftover = 41\n"
        "json.corral_mark = 1\n"
        "numpy.corral_mark = 1\n"
        "builtins.corral_mark = 1\n"
        "sys.modules['corral_planted'] = json\n"
        "open('/work/left.txt', 'w').write('left behind')\n"
        "open('/tmp/left.txt', 'w').write('left behind')\n"
        "leftover + 1",
        limits=LIMITS,
    )
    assert first.outcome == "ok", first.stderr
    assert first.result == {"text/plain": "42"}
    assert [f.path for f in first.files] == ["left.txt"]

    seen = await probe(
        engine,
        "import builtins, json, numpy, os, sys\n"
        "print(json.dumps({\n"
        "  'variable': 'leftover' in globals(),\n"
        "  'json': hasattr(json, 'corral_mark'),\n"
        "  'numpy': hasattr(numpy, 'corral_mark'),\n"
        "  'builtins': hasattr(builtins, 'corral_mark'),\n"
        "  'module': 'corral_planted' in sys.modules,\n"
        "  'work': os.listdir('/work'),\n"
        "  'tmp': os.path.exists('/tmp/left.txt'),\n"
        "}))",
    )
    assert "left.txt" not in seen.pop("work")
    assert seen == {
        "variable": False,
        "json": False,
        "numpy": False,
        "builtins": False,
        "module": False,
        "tmp": False,
    }


_AUTOGROUP_NICE = (
    "import json, os\n"
    "if os.getpid() != 1 or [p for p in os.listdir('/proc') if p.isdigit()] != ['1']:\n"
    "    raise RuntimeError('refusing to renice an autogroup outside the corral sandbox')\n"
    "{action}"
    "print(json.dumps(open('/proc/self/autogroup').read().split()[-1]))"
)


async def test_a_run_that_renices_its_autogroup_renices_no_other(engine: Engine) -> None:
    # Any process may raise its autogroup's nice value; a worker's is its own, not its
    # zygote's, which every later worker would share.
    autogroups_in_force()
    renice = "open('/proc/self/autogroup', 'w').write('19')\n"
    assert await probe(engine, _AUTOGROUP_NICE.format(action=renice)) == "19"
    assert await probe(engine, _AUTOGROUP_NICE.format(action="")) == "0"
    for host in engine._zygote_handles().values():
        if host.pid is not None:
            nice = (await anyio.Path(f"/proc/{host.pid}/autogroup").read_text()).split()[-1]
            assert nice == "0"


# network ----------------------------------------------------------------------------------

_CONNECT = """
import json, socket
def attempt(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
    except OSError as exc:
        return f"failed: {exc!r}"
    finally:
        s.close()
    return "connected"
def lookup(name):
    try:
        return f"resolved: {socket.getaddrinfo(name, 80)!r}"
    except OSError as exc:
        return f"failed: {exc!r}"
"""


@pytest.mark.network
async def test_no_network_reaches_anything(engine: Engine) -> None:
    # A real listener on the host's loopback: connecting to it from the host works, so a
    # failure inside the worker is the sandbox's doing, not an empty port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        started = time.perf_counter()
        seen = await probe(
            engine,
            _CONNECT + "print(json.dumps({\n"
            f"  'loopback': attempt('127.0.0.1', {port}),\n"
            "  'outside': attempt('192.0.2.1', 80),\n"  # TEST-NET-1: never a real host
            "  'lookup': lookup('example.com'),\n"
            # if_nameindex() needs a netlink socket, which the policy refuses.
            "  'interfaces': [line.split(':')[0].strip()\n"
            "                 for line in open('/proc/net/dev').read().splitlines()[2:]],\n"
            "}))",
        )
    assert seen["loopback"].startswith("failed"), seen
    assert seen["outside"].startswith("failed"), seen
    assert seen["lookup"].startswith("failed"), seen
    assert seen["interfaces"] == ["lo"]
    assert time.perf_counter() - started < 8  # failing fast, not hanging on timeouts


# host files and environment ---------------------------------------------------------------


def _runtime_roots() -> list[str]:
    import numpy

    return sorted(
        {
            os.path.realpath(p)
            for p in (
                sys.base_prefix,
                sys.prefix,
                os.path.dirname(os.path.dirname(numpy.__file__)),
                os.path.dirname(corral.__file__),
            )
        }
    )


def _host_view() -> dict[str, Any]:
    checkout = [REPO / "README.md", REPO / "pyproject.toml", REPO / "tests", Path(__file__)]
    for path in checkout:
        assert path.exists(), f"precondition: {path} exists on the host"
    return {
        "checkout": [str(p) for p in checkout],
        "passwd": Path("/etc/passwd").read_text(),
        "root": os.listdir("/root") if os.path.isdir("/root") else [],
    }


SANDBOX_OWN = {"/tmp": {"matplotlib"}}
"""What the sandbox makes in its own fresh file systems (matplotlib's config folder)."""


async def test_host_files_are_invisible(engine: Engine) -> None:
    host = _host_view()
    # The runtime, and the toolchains of the languages this engine serves, bound read-only
    # (a JDK's settings under /etc sit in the sandbox's own /etc, which has files of its own).
    toolchains = [b for b in engine.languages.binds() if not b.startswith("/etc/")]
    roots = sorted({*_runtime_roots(), *toolchains})
    # Directories above a runtime root (/root above /root/.pyenv/...) exist inside only as
    # the path down to it; list each one on the way.
    ancestors = sorted(
        {
            str(parent)
            for root in roots
            for parent in Path(root).parents
            if str(parent) != "/" and not any(parent.is_relative_to(r) for r in roots)
        }
    )
    seen = await probe(
        engine,
        "import json, os\n"
        f"checkout = {host['checkout']!r}\n"
        f"ancestors = {ancestors!r}\n"
        "def listing(path):\n"
        "    try:\n"
        "        return sorted(os.listdir(path))\n"
        "    except OSError as exc:\n"
        "        return repr(exc)\n"
        "print(json.dumps({\n"
        "  'shadow': os.path.exists('/etc/shadow'),\n"
        "  'passwd': open('/etc/passwd').read(),\n"
        "  'checkout': [p for p in checkout if os.path.exists(p)],\n"
        "  'sys': os.path.exists('/sys'),\n"
        "  'top': sorted(os.listdir('/')),\n"
        "  'ancestors': {a: listing(a) for a in ancestors},\n"
        "}))",
    )
    assert seen["shadow"] is False
    assert seen["passwd"] != host["passwd"]
    assert seen["checkout"] == []
    assert seen["sys"] is False
    system = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr"}
    own = {"etc", "dev", "proc", "work", "tmp", "inputs", "mnt", "home", ".corral-runtime"}
    own.add(".corral-masks")
    runtime_tops = {Path(root).parts[1] for root in roots}
    assert set(seen["top"]) <= system | own | runtime_tops, seen["top"]
    for ancestor, listing in seen["ancestors"].items():
        allowed = {
            Path(root).relative_to(ancestor).parts[0]
            for root in roots
            if Path(root).is_relative_to(ancestor) and root != ancestor
        }
        # A checkout under /tmp (or /work) has its runtime path rebuilt inside the worker's
        # own fresh /tmp, next to what the sandbox itself keeps there; neither is the host's.
        allowed |= SANDBOX_OWN.get(ancestor, set())
        assert isinstance(listing, list), (ancestor, listing)
        assert set(listing) <= allowed, (ancestor, listing, allowed)
    if "/root" in seen["ancestors"]:
        hidden = set(host["root"]) - set(seen["ancestors"]["/root"])
        assert hidden, "precondition: the host's /root holds more than the runtime"


async def test_server_environment_is_invisible(engine: Engine) -> None:
    assert os.environ[SECRET_NAME] == SECRET_VALUE  # the server really has it
    seen = await probe(
        engine,
        "import json, os\n"
        "def block(path):\n"
        "    try:\n"
        "        return open(path, 'rb').read().decode('utf-8', 'replace')\n"
        "    except OSError as exc:\n"
        "        return repr(exc)\n"
        "print(json.dumps({'environ': dict(os.environ),\n"
        "  'self': block('/proc/self/environ'), 'init': block('/proc/1/environ')}))",
    )
    assert SECRET_NAME not in seen["environ"]
    assert SECRET_VALUE not in seen["environ"].values()
    for block in (seen["self"], seen["init"]):
        assert SECRET_NAME not in block
        assert SECRET_VALUE not in block


async def test_environment_block_holds_only_the_sandbox_environment(engine: Engine) -> None:
    # /proc/self/environ shows the environment the process was *started* with; clearing
    # os.environ afterwards does not change it, so the server's own variables (PATH,
    # PYTHONPATH, ...) must not be in it either.
    seen = await probe(
        engine,
        "import json, os\n"
        "raw = open('/proc/self/environ', 'rb').read().decode('utf-8', 'replace')\n"
        "print(json.dumps({'environ': dict(os.environ),\n"
        "  'block': [entry for entry in raw.split('\\x00') if entry]}))",
    )
    block = dict(entry.split("=", 1) for entry in seen["block"])
    assert block == seen["environ"]


# writes -----------------------------------------------------------------------------------


async def test_writes_outside_work_and_tmp_fail(engine: Engine) -> None:
    seen = await probe(
        engine,
        "import json, os, sys, numpy, corral\n"
        "targets = ['/x', '/etc/x', '/etc/passwd', '/usr/x', '/usr/lib/x', '/root/x',\n"
        "  '/mnt/x', '/inputs/x', '/proc/x', '/dev/x', '/.corral-runtime/x',\n"
        "  sys.prefix + '/x', sys.base_prefix + '/x', os.path.dirname(os.__file__) + '/x',\n"
        "  os.path.dirname(numpy.__file__) + '/x', numpy.__file__,\n"
        "  os.path.dirname(corral.__file__) + '/x']\n"
        "outcome = {}\n"
        "for target in targets:\n"
        "    try:\n"
        "        with open(target, 'a') as handle:\n"
        "            handle.write('x')\n"
        "        outcome[target] = 'written'\n"
        "    except OSError as exc:\n"
        "        outcome[target] = exc.errno\n"
        "for directory in ('/newdir', sys.prefix + '/newdir'):\n"
        "    try:\n"
        "        os.mkdir(directory)\n"
        "        outcome[directory] = 'created'\n"
        "    except OSError as exc:\n"
        "        outcome[directory] = exc.errno\n"
        "for allowed in ('/work/ok.txt', '/tmp/ok.txt'):\n"
        "    with open(allowed, 'w') as handle:\n"
        "        handle.write('fine')\n"
        "    outcome[allowed] = 'written'\n"
        "print(json.dumps(outcome))",
    )
    written = {path for path, what in seen.items() if isinstance(what, str)}
    assert written == {"/work/ok.txt", "/tmp/ok.txt"}, seen


async def test_inputs_are_mounted_read_only(engine: Engine) -> None:
    data = Input(id="sales", text=b"region,total\nnorth,3\n")
    result = await engine.run(
        "import json, os\n"
        "text = open(input_files['sales']).read()\n"
        "try:\n"
        "    open(input_files['sales'], 'a').write('forged')\n"
        "    write = 'written'\n"
        "except OSError as exc:\n"
        "    write = exc.errno\n"
        "print(json.dumps({'files': input_files, 'text': text, 'write': write}))",
        inputs=[data],
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    seen = json.loads(result.stdout)
    assert isinstance(seen.pop("write"), int), "writing an input must fail with an errno"
    assert seen == {"files": {"sales": "/inputs/sales.txt"}, "text": "region,total\nnorth,3\n"}


# concurrent runs --------------------------------------------------------------------------

_NEIGHBOUR = """
import json, os, time
mine = {tag!r}
runtime = set(os.listdir('/work'))  # runtime binds under /work (a checkout's venv, say)
open(f'/work/{{mine}}.txt', 'w').write(mine)
foreign_files, foreign_pids, checks = set(), set(), 0
stop = time.monotonic() + 1.0
while time.monotonic() < stop:
    foreign_files |= set(os.listdir('/work')) - runtime - {{f'{{mine}}.txt'}}
    foreign_pids |= {{p for p in os.listdir('/proc') if p.isdigit() and p != '1'}}
    checks += 1
    time.sleep(0.01)
print(json.dumps({{'files': sorted(foreign_files), 'pids': sorted(foreign_pids),
                  'checks': checks}}))
"""


async def test_concurrent_runs_cannot_see_each_other(engine: Engine) -> None:
    assert engine.capacity >= 2
    times: dict[str, dict[str, float]] = {"a": {}, "b": {}}
    results: dict[str, Any] = {}

    def recorder(tag: str) -> Any:
        def record(event: RunEvent) -> None:
            times[tag][event.phase] = time.perf_counter()

        return record

    async def one(tag: str) -> None:
        results[tag] = await engine.run(
            _NEIGHBOUR.format(tag=tag), limits=LIMITS, on_event=recorder(tag)
        )

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a")
            tg.start_soon(one, "b")
    # Both were executing before either finished: they really ran side by side.
    assert max(times["a"]["executing"], times["b"]["executing"]) < min(
        times["a"]["finished"], times["b"]["finished"]
    )
    for tag in ("a", "b"):
        result = results[tag]
        assert result.outcome == "ok", result.stderr
        seen = json.loads(result.stdout)
        assert seen["checks"] > 1
        assert seen == {"files": [], "pids": [], "checks": seen["checks"]}
        assert [f.path for f in result.files] == [f"{tag}.txt"]
