"""/run_code_batch's case servers against a live server: every case as fresh as its own run.

The cases of a batch fork from a case server that compiled the program once; these tests
check, over real HTTP on the shared real engine, that a case sees nothing of another case
(globals, files, processes, System V IPC), gets its own stdin, answers exactly what
``/run_code`` answers for the same program, and that hostile, memory-hungry, forking or
looping cases cost only their own result. Results are checked with the official
``sandbox-fusion`` client's response model.
"""

from __future__ import annotations

import ast
import errno
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sandbox_fusion

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import KEYS
from tests.http.test_sandboxfusion import live, verl_body, verl_post

pytestmark = [pytest.mark.anyio, pytest.mark.network, pytest.mark.isolation]

# Proves, from inside a case, that it runs in corral's sandbox: a pid namespace of its own in
# which only the case server (pid 1) and the case's own processes exist, hostname "corral".
# Hostile cases run only after it. It also shows that no earlier case left a process behind.
CASE_GUARD = """\
import os, socket
_seen = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
if _seen != sorted({1, os.getpid()}) or socket.gethostname() != 'corral':
    raise RuntimeError(f'refusing to run hostile code outside a case server: {_seen}')
print('sandbox confirmed', flush=True)
"""
CONFIRMED = "sandbox confirmed\n"


@pytest.fixture(scope="module")
async def url(real_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    config = Config(
        data_dir=tmp_path_factory.mktemp("batch"), api_keys=KEYS, timeout=20, open_run_code=True
    )
    async with live(create_app(real_engine, config)) as served:
        yield served


async def batch(url: str, code: str, cases: list[dict[str, Any]], **fields: Any) -> list[Any]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        response = await client.post(
            "/run_code_batch", json={"code": code, "cases": cases, **fields}
        )
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    assert len(results) == len(cases)
    for result in results:
        passed = result.pop("passed")
        assert passed in (True, False, None)
        sandbox_fusion.RunCodeResponse.parse_obj(result)  # the official client's model
        result["passed"] = passed
    return results


def _run(result: dict[str, Any]) -> tuple[Any, ...]:
    run = result["run_result"] or {}
    return (result["status"], run.get("status"), run.get("return_code"), run.get("stdout"),
            run.get("stderr"))  # fmt: skip


LEAKS = (
    CASE_GUARD
    + """\
import builtins, ctypes, subprocess, sys, time
librt = ctypes.CDLL('librt.so.1', use_errno=True)
state = {
    'global': hasattr(builtins, 'planted'),
    'work': os.path.exists('planted.txt'),
    'mnt': os.path.exists('/mnt/data/planted2.txt'),
    'tmp': os.path.exists('/tmp/planted.txt'),
    'shm': os.path.exists('/dev/shm/planted'),
    'sysv': len(open('/proc/sysvipc/shm').read().splitlines()) > 1,
    'module': hasattr(json, 'planted'),
    'mqueue': librt.mq_open(b'/planted', 0o100, 0o600, None) >= 0,  # none can be made
}
print(json.dumps(state, sort_keys=True))
builtins.planted = True
json.planted = True
for path in ('planted.txt', '/mnt/data/planted2.txt', '/tmp/planted.txt', '/dev/shm/planted'):
    open(path, 'w').close()
os.makedirs('deep/er', exist_ok=True)
ctypes.CDLL(None).shmget(0x5EED + int(sys.stdin.read() or 0), 4096, 0o1000 | 0o600)
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
"""
)


async def test_no_case_sees_what_another_left(url: str) -> None:
    code = "import json\n" + LEAKS
    results = await batch(url, code, [{"stdin": str(i)} for i in range(6)])
    names = ("global", "module", "mnt", "mqueue", "shm", "sysv", "tmp", "work")
    clean = json.dumps(dict.fromkeys(names, False), sort_keys=True)
    for result in results:
        status, run_status, code_, stdout, stderr = _run(result)
        assert (status, run_status, code_) == ("Success", "Finished", 0), stderr
        assert stdout == CONFIRMED + clean + "\n", stdout  # the guard saw no leftover process


async def test_each_case_gets_its_own_stdin_and_the_batch_files(url: str) -> None:
    code = "import sys\nprint(sys.stdin.read()[::-1], open('data.txt').read())"
    stdins = [f"case {i}" for i in range(12)]
    cases = [{"stdin": text, "expected_stdout": text[::-1] + " hello"} for text in stdins]
    cases[5] = {"expected_stdout": " hello"}  # no stdin: EOF at once
    files = {"data.txt": "aGVsbG8="}
    results = await batch(url, code, cases, files=files)
    assert [r["passed"] for r in results] == [True] * 12


PARITY = [
    "print('out'); import sys; print('err', file=sys.stderr)",
    "import sys\nsys.exit(3)",
    "import sys\nsys.exit('bye')",
    "def f():\n    return 1 / 0\nf()",
    "print(input())",
    "x = 1\nx",
    "print(1",
    "import os\nos._exit(4)",
    "import random, sys\nprint(type(random.random()).__name__, sys.argv, __name__)",
]


@pytest.mark.parametrize("code", PARITY)
async def test_a_case_answers_what_run_code_answers(url: str, code: str) -> None:
    single = (await verl_post(url, verl_body(code, "line\n"))).json()
    [case] = await batch(url, code, [{"stdin": "line\n"}])
    del case["passed"]
    for answer in (single, case):
        if answer["run_result"]:
            answer["run_result"]["execution_time"] = 0
    assert case == single


async def test_a_syntax_error_fails_every_case_alike(url: str) -> None:
    results = await batch(url, "print('a'\n", [{"stdin": "", "expected_stdout": "a"}] * 3)
    for result in results:
        status, run_status, code, stdout, stderr = _run(result)
        assert (status, run_status, code, stdout) == ("Failed", "Finished", 1, "")
        assert "SyntaxError" in stderr
        assert result["passed"] is False


async def test_random_streams_differ_between_cases(url: str) -> None:
    code = "import random, os\nprint(random.getrandbits(64), os.urandom(8).hex())"
    results = await batch(url, code, [{}] * 8)
    outputs = [_run(r)[3] for r in results]
    assert len(set(outputs)) == 8


async def test_memory_forks_and_loops_cost_only_their_own_case(url: str) -> None:
    code = (
        CASE_GUARD
        + """\
import sys, time
what = sys.stdin.read()
if what == 'memory':
    hog = []
    while True:
        hog.append(bytearray(16 * 1024 * 1024))
elif what == 'forks':
    children = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
    except OSError:
        print('fork refused after', children > 0)
elif what == 'loop':
    print('looping', flush=True)
    while True:
        pass
print('fine')
"""
    )
    order = ["memory", "ok", "forks", "ok", "loop", "ok", "memory", "forks", "ok"]
    cases = [{"stdin": what, "run_timeout": 2 if what == "loop" else 10} for what in order]
    results = await batch(url, code, cases, memory_limit_MB=256)
    for what, result in zip(order, results, strict=True):
        status, run_status, code_, stdout, stderr = _run(result)
        assert stdout.startswith(CONFIRMED), (what, stdout, stderr)
        if what == "ok":
            assert (status, code_, stdout) == ("Success", 0, CONFIRMED + "fine\n"), stderr
        elif what == "memory":
            assert (status, run_status, code_) == ("Failed", "Finished", 1)
            assert "MemoryError" in stderr
        elif what == "forks":
            assert (status, stdout) == ("Success", CONFIRMED + "fork refused after True\nfine\n")
        else:
            assert (status, run_status, code_) == ("Failed", "TimeLimitExceeded", None)
            assert stdout == CONFIRMED + "looping\n"


async def test_a_hostile_case_cannot_reach_its_case_server(url: str) -> None:
    code = (
        CASE_GUARD
        + """\
import ctypes, signal, sys
if sys.stdin.read() == 'attack':
    libc = ctypes.CDLL(None, use_errno=True)
    said = []
    said.append(('ptrace', libc.ptrace(16, 1, None, None), ctypes.get_errno()))  # ATTACH
    buf = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    said.append(('vm_readv', libc.process_vm_readv(1, iov, 1, iov, 1, 0), ctypes.get_errno()))
    for path in ('/proc/1/mem', '/proc/1/environ', '/proc/1/fd/3'):
        try:
            open(path, 'rb').read(1)
            said.append((path, 'opened'))
        except OSError as exc:
            said.append((path, exc.errno))
    print(said, flush=True)
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP, signal.SIGCHLD):
        os.kill(1, sig)
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nobody else: the case server, init of the namespace, is not signalled
    print('still here')
else:
    print('served')
"""
    )
    cases = [{"stdin": "attack" if i % 3 == 0 else "", "expected_stdout": None} for i in range(9)]
    results = await batch(url, code, cases)
    for index, result in enumerate(results):
        status, _run_status, _code, stdout, stderr = _run(result)
        assert stdout.startswith(CONFIRMED), (index, stdout, stderr)
        if index % 3:
            assert (status, stdout) == ("Success", CONFIRMED + "served\n")
            continue
        assert status == "Success", stderr
        said = {what: rest for what, *rest in ast.literal_eval(stdout.splitlines()[1])}
        assert said["ptrace"] == [-1, errno.EPERM]
        assert said["vm_readv"] == [-1, errno.EPERM]
        for path in ("/proc/1/mem", "/proc/1/environ", "/proc/1/fd/3"):
            assert said[path] in ([errno.EACCES], [errno.EPERM]), (path, said)
        assert stdout.endswith("still here\n")
    [reply] = await batch(url, "print('after')", [{"stdin": ""}])
    assert _run(reply)[3] == "after\n"


async def test_a_case_that_spoils_its_folder_retires_the_server(url: str) -> None:
    code = """\
import os
print(sorted(os.listdir('.')))
os.makedirs('locked/inner')
open('locked/inner/f', 'w').close()
os.chmod('locked', 0)
"""
    results = await batch(url, code, [{"stdin": ""}] * 5)
    for result in results:
        assert _run(result)[:4] == ("Success", "Finished", 0, f"{_first_listing(results)}\n")


def _first_listing(results: list[dict[str, Any]]) -> str:
    listing = str(results[0]["run_result"]["stdout"]).strip()
    assert "locked" not in listing
    return listing
