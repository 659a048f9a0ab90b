"""Engine.run_cases: one program, many cases, each a fresh run forked from a case server (real
workers: a case names its server from inside it); code refused before it runs, on the
sandbox's in-process twin."""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Case, Engine
from corral.engine import _cases as cases_module
from corral.errors import EngineClosed
from corral.sandbox import CaseServer
from corral.sandbox._case_protocol import CaseEnded

pytestmark = pytest.mark.anyio

# Each pid namespace has an inode of its own: the cases of one case server share it.
# Names the case's server: its pid namespace, and (since the kernel reuses a freed namespace's
# number) the server's host uid and start time.
NAMESPACE = (
    "import os\n"
    "uid = open('/proc/self/uid_map').read().split()[1]\n"
    "started = open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]\n"
    "print(os.readlink('/proc/self/ns/pid') + '/' + uid + '/' + started, input())"
)


async def test_results_come_in_case_order_and_servers_are_reused(real_engine: Engine) -> None:
    cases = [Case(stdin=f"{i}\n".encode()) for i in range(12)]
    results = await real_engine.run_cases(NAMESPACE, cases, limits=Limits(timeout=10))
    assert [r.outcome for r in results] == ["ok"] * 12
    assert [r.stdout.split()[1] for r in results] == [str(i) for i in range(12)]
    servers = {r.stdout.split()[0] for r in results}
    # Alone on the engine, the batch opens a lane per worker, each one case server.
    assert len(servers) == real_engine.capacity


async def test_each_case_has_its_own_limits(real_engine: Engine) -> None:
    code = "import time\ntime.sleep(float(input()))\nprint('slept')"
    cases = [
        Case(stdin=b"5\n", limits=Limits(timeout=0.5)),
        Case(stdin=b"0\n"),
        Case(stdin=b"0.1\n", limits=Limits(timeout=5)),
    ]
    results = await real_engine.run_cases(code, cases, limits=Limits(timeout=3))
    assert [r.outcome for r in results] == ["timeout", "ok", "ok"]
    assert "0.5 s" in results[0].message
    first, second = results[1].evidence, results[2].evidence
    assert first is not None
    assert second is not None
    assert first.code_sha256 == second.code_sha256
    assert (first.limits["timeout"], second.limits["timeout"]) == (3, 5)


async def test_a_server_that_misses_its_grace_is_killed_and_replaced(
    real_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(self: CaseServer) -> CaseEnded:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    # No server answers in time: not even one whose answer is already in its socket.
    monkeypatch.setattr(cases_module, "STOP_GRACE", 0.0)
    monkeypatch.setattr(CaseServer, "_ended", never)
    cases = [Case(stdin=f"{i}\n".encode()) for i in range(6)]
    results = await real_engine.run_cases(NAMESPACE, cases, limits=Limits(timeout=10))
    assert [r.outcome for r in results] == ["ok"] * 6  # each had reported before its stop
    assert len({r.stdout.split()[0] for r in results}) == 6  # a new server every time
    healthy = await real_engine.run_cases("print('fine')", [Case()])
    assert healthy[0].stdout == "fine\n"


async def test_a_case_that_breaks_what_its_server_restores_ends_that_server(
    real_engine: Engine,
) -> None:
    # The case's clean-up runs after its slot is given back, and its lane's next case waits
    # for it: a server that could not put /tmp back serves no later case.
    code = (
        "import shutil\n"
        + NAMESPACE.replace("input()", "os.path.isdir('/tmp/matplotlib')")
        + "\nif input() == 'break':\n    shutil.rmtree('/tmp/matplotlib')\n"
    )
    stdins = [b"break\n", *[b"keep\n"] * 5]
    results = await real_engine.run_cases(code, [Case(stdin=s) for s in stdins])
    assert [r.outcome for r in results] == ["ok"] * 6
    seen = [r.stdout.split() for r in results]
    assert [fresh for _, fresh in seen] == ["True"] * 6
    assert seen[0][0] not in {server for server, _ in seen[1:]}


@pytest.mark.isolation
async def test_a_case_clean_up_ends_before_the_next_case_asks_for_its_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The clean-up runs after the case gave its slot back; the lane's next case waits for
    # it before it asks for a slot, whose clock the clean-up would otherwise spend.
    order: list[str] = []
    real_end_stop = CaseServer.end_stop

    async def end_stop(self: CaseServer, grace: float) -> CaseEnded | None:
        ended = await real_end_stop(self, grace)
        if ended is not None:
            order.append("cleaned")
        return ended

    monkeypatch.setattr(CaseServer, "end_stop", end_stop)
    async with Engine(capacity=1, limits=Limits(timeout=10)) as single:
        real_slot = single._runs.scheduler.slot

        def slot(*args: Any, **kwargs: Any) -> AbstractAsyncContextManager[None]:
            order.append("slot")
            return real_slot(*args, **kwargs)

        monkeypatch.setattr(single._runs.scheduler, "slot", slot)
        results = await single.run_cases("print(input())", [Case(stdin=b"x\n")] * 3)
    assert [r.stdout for r in results] == ["x\n"] * 3
    assert order == ["slot", "cleaned", "slot", "cleaned", "slot"]


LEADING_IMPORTS = (
    "import sys\n"
    "from math import *\n"
    "import json as j\n"
    "n = int(input())\n"
    "print(j.dumps([floor(pi * n), sorted(k for k in globals() if not k.startswith('__'))]))\n"
    "if n == 2:\n"
    "    raise ValueError(n)\n"
    "if n == 3:\n"
    "    import this\n"
)
"""Run by a case server before it forks (the first three lines): each case must still see
exactly what a fresh run sees."""

AFTER_LEADING_IMPORTS = {
    "names, output, traceback lines": LEADING_IMPORTS,
    "stdin bound by name": "from sys import stdin\nn = int(input())\nprint(n, list(stdin))",
    "input bound by name": "from builtins import input\nprint(input())",
    "argv bound by name": "from sys import argv\nprint(argv)",
    "a late future import": "import os\nfrom __future__ import annotations\nprint('ran')",
    "a string after the imports": "import os\n'not a docstring'\nprint(__doc__)",
    "a compile-time warning": "import os\nx = int(input())\nprint(x is 1)",
    "a parser's warning": "import os\nprint(len('\\d'))",
    "the order of globals()": "import math\nprint([k for k in globals() if k[0] != '_'])",
    "a submodule not loaded": "from email import mime\nprint(mime.__name__)",
    "stdin through star imports": (
        "from sys import *\nfrom builtins import *\nimport json\n"
        "n = int(input())\nprint(n, stdin.read().split(), argv, json.dumps(n))"
    ),
    "every name of sys and builtins": (
        "from sys import *\nfrom builtins import *\nimport sys, builtins\n"
        "for module in (sys, builtins):\n"
        "    names = [n for n in dir(module) if not n.startswith('_')]\n"
        "    print(sorted(n for n in names if globals().get(n) is not getattr(module, n)))"
    ),
}


@pytest.mark.parametrize("code", AFTER_LEADING_IMPORTS.values(), ids=AFTER_LEADING_IMPORTS)
async def test_a_case_after_leading_imports_is_what_a_fresh_run_gives(
    real_engine: Engine, code: str
) -> None:
    stdins = [b"1\n2\n3\n", b"2\n", b"3\n"]
    batch = await real_engine.run_cases(code, [Case(stdin=s) for s in stdins])
    fresh = [await real_engine.run(code, stdin=s) for s in stdins]
    for case, run in zip(batch, fresh, strict=True):
        assert (case.outcome, case.stdout, case.stderr) == (run.outcome, run.stdout, run.stderr)
        assert case.error == run.error


async def test_leading_imports_keep_tracebacks_and_later_imports(real_engine: Engine) -> None:
    stdins = [b"1\n", b"2\n", b"3\n"]
    results = await real_engine.run_cases(LEADING_IMPORTS, [Case(stdin=s) for s in stdins])
    assert [r.outcome for r in results] == ["ok", "python_error", "ok"]
    assert "line 7, in <module>" in results[1].stderr
    assert "Beautiful is better than ugly" in results[2].stdout


async def test_invalid_code_is_refused_per_case(engine: Engine) -> None:
    results = await engine.run_cases("print(1)\x00", [Case(), Case()])
    assert [r.outcome for r in results] == ["invalid_input", "invalid_input"]


async def test_a_closed_engine_refuses_a_batch() -> None:
    with pytest.raises(EngineClosed):
        await Engine().run_cases("print(1)", [Case()])


async def test_a_cancelled_batch_stops_its_cases_and_servers(real_engine: Engine) -> None:
    lean = real_engine._zygote_handles()["lean"]
    assert lean.pid is not None
    before = _children(lean.pid)
    with anyio.move_on_after(1.5):
        await real_engine.run_cases("while True: pass", [Case()] * 4, limits=Limits(timeout=30))
    assert real_engine.statistics().running == 0
    with anyio.fail_after(10):
        while _children(lean.pid) > before:  # noqa: ASYNC110 - no event for a reaped process
            await anyio.sleep(0.05)
    [after] = await real_engine.run_cases("print('fine')", [Case()])
    assert after.stdout == "fine\n"


def _children(pid: int) -> int:
    """Live children of ``pid`` (ready workers and case servers of that zygote)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += fields[1] == str(pid) and fields[0] != "Z"
    return count
