"""Cases of a program that is not Python, exec'd by their case server with no driver between:
through the engine's real case servers (``Engine.run_cases``), each case's program proves from
inside that it is sandboxed before it looks at anything else.

The program (C++) reads one command from stdin and prints one JSON line of what it sees: its
parent (the server, pid 1), the processes of its namespace, whether it holds any descriptor
past stdio, its limits, and who its server is (the pid namespace and pid 1's start time).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral._limits import Limits
from corral.engine import Case, Engine, ExecutionResult, discover_languages
from corral.sandbox import RunLimits
from corral.sandbox.inside import _exec_case
from tests.engine.test_programs import MEMORY, PROGRAMS, SERVED

_MIB = 1024 * 1024

pytestmark = [pytest.mark.anyio]

PROBE = r"""
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <string>
#include <sys/resource.h>
#include <unistd.h>
static int processes() {
    int n = 0; DIR *d = opendir("/proc"); struct dirent *e;
    while (d && (e = readdir(d))) n += e->d_name[0] >= '0' && e->d_name[0] <= '9';
    if (d) closedir(d);
    return n;
}
static std::string server() {
    char ns[64] = ""; readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    std::ifstream stat("/proc/1/stat"); std::string all, field; std::getline(stat, all);
    all = all.substr(all.rfind(')') + 2);
    for (int i = 0; i < 20; i++) { size_t at = all.find(' '); field = all.substr(0, at);
                                   all = all.substr(at + 1); }
    return std::string(ns) + "/" + field;
}
int main() {
    char host[64] = ""; gethostname(host, sizeof host);
    if (getuid() != 1000 || strcmp(host, "corral") != 0 || getppid() != 1 || processes() != 2) {
        puts("refusing: not a case of a corral case server"); return 99;
    }
    std::string cmd; std::cin >> cmd;
    if (cmd == "nice") { errno = 0; int r = setpriority(PRIO_PROCESS, 1, 10);
                         printf("{\"reniced\": %d}\n", r); return 0; }
    if (cmd == "segv") { raise(SIGSEGV); }
    if (cmd == "count") { long n = 0; char c; while (std::cin.get(c)) n++;
                          printf("{\"bytes\": %ld}\n", n); return 0; }
    if (cmd == "write") { std::ofstream("made.txt") << "made\n"; }
    int fds = 0; for (int fd = 3; fd < 1024; fd++) fds += fcntl(fd, F_GETFD) != -1;
    struct rlimit cpu, files, as; getrlimit(RLIMIT_CPU, &cpu); getrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_AS, &as);
    struct rlimit more = {cpu.rlim_max + 60, cpu.rlim_max + 60};
    int raised = setrlimit(RLIMIT_CPU, &more);
    printf("{\"server\": \"%s\", \"fds\": %d, \"files\": [%ld, %ld], \"cpu_hard_is_soft\": %d,"
           " \"raised_cpu\": %d, \"as_bounded\": %d, \"nice\": %d, \"sid_is_pid\": %d}\n",
           server().c_str(), fds, (long)files.rlim_cur, (long)files.rlim_max,
           cpu.rlim_cur == cpu.rlim_max, raised, as.rlim_max != RLIM_INFINITY,
           getpriority(PRIO_PROCESS, 0), getsid(0) == getpid());
}
"""


def _served() -> None:
    if "cpp" not in discover_languages().served:
        pytest.skip(f"no cpp toolchain here: {discover_languages().missing['cpp']}")


async def _cases(engine: Engine, *cases: Case, source: str = PROBE) -> list[ExecutionResult]:
    _served()
    return await engine.run_cases(source, list(cases), language="cpp", compile_timeout=60)


def _seen(result: ExecutionResult) -> Any:
    assert result.outcome == "ok", (result.outcome, result.message, result.stdout, result.stderr)
    return json.loads(result.stdout)


async def test_a_case_is_the_program_alone_with_its_server(one_lane: Engine) -> None:
    results = await _cases(one_lane, *(Case(stdin=b"look") for _ in range(3)))
    seen = [_seen(r) for r in results]
    assert len({s["server"] for s in seen}) == 1  # one server, three cases
    for one in seen:
        # Nothing of the server's (its control socket, the case's protocol socket) is left.
        assert one["fds"] == 0
        assert one["cpu_hard_is_soft"] == 1
        assert one["raised_cpu"] == -1  # the hard limit is the case's
        assert one["as_bounded"] == 1
        assert one["files"] == [Limits().open_files] * 2
        assert one["sid_is_pid"] == 1  # a session (and autogroup) of its own
        assert one["nice"] == 0


async def test_return_codes_and_signals_are_a_fresh_runs(one_lane: Engine) -> None:
    _served()
    batch = await _cases(one_lane, Case(stdin=b"segv"), Case(stdin=b"look"))
    fresh = await one_lane.run(PROBE, language="cpp", stdin=b"segv", compile_timeout=60)
    assert batch[0].exit_code == fresh.exit_code == -11
    assert (batch[0].outcome, batch[0].error) == (fresh.outcome, fresh.error)
    assert batch[1].exit_code == 0
    assert batch[1].error is None


async def test_a_large_stdin_reaches_the_program_whole(one_lane: Engine) -> None:
    stdin = b"count " + b"x" * (300 * 1024)  # past a pipe's capacity: a file in /tmp
    small = b"count " + b"y" * 100
    results = await _cases(one_lane, Case(stdin=stdin), Case(stdin=small))
    assert [json.loads(r.stdout)["bytes"] for r in results] == [len(stdin) - 5, len(small) - 5]


async def test_files_it_writes_are_reported_and_the_program_is_not(one_lane: Engine) -> None:
    results = await _cases(one_lane, Case(stdin=b"write"), Case(stdin=b"look"))
    assert [f.path for f in results[0].files] == ["made.txt"]
    assert results[0].file_contents["made.txt"] == b"made\n"
    assert list(results[1].files) == []  # the case before it left nothing behind


async def test_a_case_that_renices_its_server_is_the_last_of_it(one_lane: Engine) -> None:
    results = await _cases(one_lane, Case(stdin=b"look"), Case(stdin=b"nice"), Case(stdin=b"look"))
    before, attack, after = json.loads(results[0].stdout), results[1], json.loads(results[2].stdout)
    assert json.loads(attack.stdout) == {"reniced": 0}  # the kernel let it (same uid)
    assert after["nice"] == 0
    assert after["server"] != before["server"]  # the server noticed and retired


async def test_cases_with_other_limits_run_under_their_own(one_lane: Engine) -> None:
    limits = [Limits(timeout=10, open_files=n) for n in (256, 100, 200)]
    results = await _cases(one_lane, *(Case(stdin=b"look", limits=x) for x in limits))
    seen = [_seen(r) for r in results]
    assert [s["files"] for s in seen] == [[256, 256], [100, 100], [200, 200]]
    assert len({s["server"] for s in seen}) == 3  # a server takes its first case's for good


async def test_a_server_too_small_for_itself_forks_its_cases(one_lane: Engine) -> None:
    limits = Limits(timeout=10, open_files=16)
    results = await _cases(one_lane, *(Case(stdin=b"look", limits=limits) for _ in range(2)))
    seen = [_seen(r) for r in results]
    assert [s["files"] for s in seen] == [[16, 16], [16, 16]]
    assert seen[0]["server"] == seen[1]["server"]
    assert all(s["fds"] == 0 and s["raised_cpu"] == -1 for s in seen)


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_each_languages_cases_answer_as_fresh_runs(one_lane: Engine, language: str) -> None:
    if language not in SERVED:
        pytest.skip(f"no {language} toolchain here: {discover_languages().missing[language]}")
    memory = Limits(timeout=10, memory_bytes=MEMORY.get(language, 256 * _MIB))
    spin = Limits(timeout=1, memory_bytes=memory.memory_bytes)
    stdins = [b"echo one\n", b"fail now\n", b"eat all\n", b"spin x\n", b"echo two\n"]
    limits = [memory, memory, memory, spin, memory]
    results = await one_lane.run_cases(
        PROGRAMS[language],
        [Case(stdin=i, limits=x) for i, x in zip(stdins, limits, strict=True)],
        language=language,
        compile_timeout=60,
    )
    echo, fail, eat, spun, again = results
    assert (echo.outcome, echo.stdout, echo.exit_code) == ("ok", "one\n", 0), echo.stderr
    assert list(echo.files) == []  # the program's own files are not the run's
    assert (fail.outcome, fail.exit_code) == ("python_error", 3)
    assert "failing" in fail.stderr
    assert eat.outcome in ("python_error", "memory_limit"), (eat.outcome, eat.message)
    assert (eat.exit_code != 0, eat.stdout) == (True, "")
    assert (spun.outcome, spun.exit_code) == ("timeout", None)
    assert (again.outcome, again.stdout) == ("ok", "two\n")


def _limits(cpu_seconds: int) -> RunLimits:
    return RunLimits(
        memory_bytes=1, cpu_seconds=cpu_seconds, pids=1, file_bytes=1, open_files=64,
        max_files=1, max_file_bytes=1, max_display=1, display_bytes=1, output_chars=1,
    )  # fmt: skip


def test_a_server_is_tired_past_half_its_cpu_limit() -> None:
    assert _exec_case.tired(_limits(0))  # this process has used some CPU: more than half of 0
    assert not _exec_case.tired(_limits(10**9))


def test_bounds_are_the_same_but_for_fewer_cpu_seconds() -> None:
    adopted = _limits(11)
    assert _exec_case.same_bounds(adopted, _limits(11))
    assert _exec_case.same_bounds(adopted, _limits(10))
    assert not _exec_case.same_bounds(adopted, _limits(12))
    other = RunLimits(**{**{n: getattr(adopted, n) for n in RunLimits.__slots__}, "pids": 2})
    assert not _exec_case.same_bounds(adopted, other)


async def test_a_program_the_kernel_will_not_run_is_the_runs_error(one_lane: Engine) -> None:
    if "rust" not in SERVED:
        pytest.skip(f"no rust toolchain here: {discover_languages().missing['rust']}")
    library = '#![crate_type = "lib"]\npub fn f() {}\n'  # compiles to an rlib, not a program
    batch = await one_lane.run_cases(library, [Case(), Case()], language="rust", compile_timeout=60)
    fresh = await one_lane.run(library, language="rust", compile_timeout=60)
    assert fresh.outcome == "python_error"
    assert fresh.error is not None
    for case in batch:  # the server lives on: both cases answer, as the fresh run does
        assert case.outcome == fresh.outcome, (case.outcome, case.message)
        assert case.error is not None
        assert case.error.type == fresh.error.type
        assert "Exec format error" in case.stderr
