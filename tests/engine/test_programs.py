"""Languages beyond Python on the real sandbox: each served language's program reads stdin and
writes stdout, fails, runs out of time and out of memory; C++ compile errors and compile
timeouts; a compiled program proves from inside that it is sandboxed before it tries anything.

One program per language, driven by its stdin, so each language compiles once (the engine
caches it). A language whose toolchain this host lacks is skipped, naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import anyio
import anyio.lowlevel
import pytest

from corral._limits import Limits
from corral.engine import (
    Case,
    Engine,
    ExecutionResult,
    FileInfo,
    Languages,
    Toolchain,
    discover_languages,
)
from corral.engine._languages import CompileLimits
from corral.engine._programs import CompileRun, Program, Programs
from corral.errors import LanguageUnavailable

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

_MIB = 1024 * 1024
LIMITS = Limits(timeout=10)
SPIN = Limits(timeout=1)
SERVED = discover_languages().served

# Each reads "COMMAND ARG": echo ARG, fail (stderr, exit 3), spin forever, eat memory.
PROGRAMS = {
    "cpp": r"""
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
int main() {
    std::string cmd, arg;
    std::cin >> cmd >> arg;
    if (cmd == "echo") { std::cout << arg << "\n"; return 0; }
    if (cmd == "fail") { std::cerr << "failing\n"; return 3; }
    if (cmd == "spin") { volatile long i = 0; for (;;) i++; }
    size_t n = (size_t)3 << 30;
    char *p = (char *)malloc(n);
    if (!p) { std::cerr << "no memory\n"; return 4; }
    memset(p, 1, n);
    std::cout << (int)p[n - 1] << "\n";
}
""",
    "rust": r"""
use std::io::Read;
fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let words: Vec<&str> = s.split_whitespace().collect();
    match words[0] {
        "echo" => println!("{}", words[1]),
        "fail" => { eprintln!("failing"); std::process::exit(3); }
        "spin" => loop { std::hint::black_box(0); },
        _ => { let v = vec![1u8; 3 << 30]; println!("{}", v[v.len() - 1]); }
    }
}
""",
    "java": r"""
import java.util.*;
public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        String cmd = in.next(), arg = in.next();
        if (cmd.equals("echo")) { System.out.println(arg); return; }
        if (cmd.equals("fail")) { System.err.println("failing"); System.exit(3); }
        if (cmd.equals("spin")) { for (;;) {} }
        List<byte[]> kept = new ArrayList<>();
        for (int i = 0; i < 400; i++) kept.add(new byte[8 << 20]);
        System.out.println(kept.size());
    }
}
""",
    "nodejs": r"""
const [cmd, arg] = require('fs').readFileSync(0, 'utf8').trim().split(/\s+/);
if (cmd === 'echo') { console.log(arg); }
else if (cmd === 'fail') { console.error('failing'); process.exit(3); }
else if (cmd === 'spin') { for (;;) {} }
else { const kept = []; for (let i = 0; i < 400; i++) kept.push(Buffer.alloc(8 << 20, 1));
       console.log(kept.length); }
""",
    "typescript": r"""
const [cmd, arg]: string[] = require('fs').readFileSync(0, 'utf8').trim().split(/\s+/);
if (cmd === 'echo') { console.log(arg); }
else if (cmd === 'fail') { console.error('failing'); process.exit(3); }
else if (cmd === 'spin') { for (;;) {} }
else { const kept: Buffer[] = [];
       for (let i = 0; i < 400; i++) kept.push(Buffer.alloc(8 << 20, 1));
       console.log(kept.length); }
""",
    "bash": r"""
read cmd arg
case "$cmd" in
  echo) echo "$arg" ;;
  fail) echo failing >&2; exit 3 ;;
  spin) while :; do :; done ;;
  *) x=$(head -c 3000000000 /dev/zero | tr '\0' a); echo ${#x} ;;
esac
""",
}
MEMORY = {"nodejs": 1024 * _MIB, "typescript": 1024 * _MIB, "java": 1024 * _MIB}
"""A runtime that maps much address space up front (V8's code range, a JVM's reservations)
needs about 768 MiB of it to start: ``Limits.memory_bytes`` bounds each process's address
space as well as the sandbox's sum. The others get less."""


def _served(language: str) -> None:
    if language not in SERVED:
        pytest.skip(f"no {language} toolchain here: {discover_languages().missing[language]}")


async def _run(
    engine: Engine, language: str, stdin: str, limits: Limits = LIMITS
) -> ExecutionResult:
    return await engine.run(
        PROGRAMS[language], language=language, stdin=stdin.encode(), limits=limits,
        compile_timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_stdin_in_stdout_out(real_engine: Engine, language: str) -> None:
    _served(language)
    result = await real_engine.run(
        PROGRAMS[language], language=language, stdin=b"echo hello-there\n", compile_timeout=60
    )
    assert (result.outcome, result.stdout, result.exit_code) == ("ok", "hello-there\n", 0), (
        result.stderr,
        result.message,
    )
    assert result.files == ()  # the program's own files are not reported as the run's
    # TypeScript is transpiled once, but answers as SandboxFusion's tsx does: no compile.
    assert (result.compile is not None) == SERVED[language].reports_compile
    if result.compile is not None:
        assert (result.compile.status, result.compile.return_code) == ("Finished", 0)


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_an_error_is_the_programs_return_code(real_engine: Engine, language: str) -> None:
    _served(language)
    result = await real_engine.run(
        PROGRAMS[language], language=language, stdin=b"fail now\n", compile_timeout=60
    )
    assert (result.outcome, result.exit_code) == ("python_error", 3)
    assert "failing" in result.stderr


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_a_timeout(real_engine: Engine, language: str) -> None:
    _served(language)
    compiled = await _run(real_engine, language, "echo x")  # the clock below is the run's alone
    assert compiled.outcome == "ok"
    result = await real_engine.run(
        PROGRAMS[language], language=language, stdin=b"spin x\n", limits=SPIN
    )
    assert result.outcome == "timeout"
    assert result.exit_code is None


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_a_memory_limit(real_engine: Engine, language: str) -> None:
    _served(language)
    limits = LIMITS.replace(memory_bytes=MEMORY.get(language, 256 * _MIB))
    result = await real_engine.run(
        PROGRAMS[language], language=language, stdin=b"eat all\n", limits=limits,
        compile_timeout=60,
    )  # fmt: skip
    # 3 GiB (400 x 8 MiB for the runtimes) never fits: the allocation fails, or the kernel
    # kills the program; either way it printed no total.
    assert result.outcome in ("python_error", "memory_limit"), (result.outcome, result.message)
    assert result.exit_code != 0
    assert result.stdout == ""


async def test_a_typescript_syntax_error_is_the_runs_failure(real_engine: Engine) -> None:
    _served("typescript")
    result = await real_engine.run("let x: number = ;", language="typescript", compile_timeout=60)
    assert result.compile is None
    assert result.outcome == "python_error"
    assert result.exit_code not in (None, 0)
    assert "Expression expected" in result.stderr


async def test_cpp_compile_error_never_runs(real_engine: Engine) -> None:
    _served("cpp")
    result = await real_engine.run("int main() { return undeclared; }", language="cpp")
    assert result.outcome == "python_error"
    assert result.compile is not None
    assert result.compile.status == "Finished"
    assert result.compile.return_code not in (None, 0)
    assert "undeclared" in result.compile.stderr


async def test_cpp_compile_timeout(real_engine: Engine) -> None:
    _served("cpp")
    # The whole standard library, optimised: seconds of compiling, far past a quarter second.
    slow = "#include <bits/stdc++.h>\nint main() { std::map<int, int> m; return m.size(); }\n"
    result = await real_engine.run(slow, language="cpp", compile_timeout=0.25)
    assert result.compile is not None
    assert result.compile.status == "TimeLimitExceeded"
    assert result.compile.return_code is None
    assert result.outcome == "timeout"


async def test_a_compile_is_cached_and_cases_run_from_it(real_engine: Engine) -> None:
    _served("cpp")
    source = PROGRAMS["cpp"] + "// cached\n"
    before = real_engine._programs.compiles
    results = await real_engine.run_cases(
        source,
        [Case(stdin=f"echo {i}".encode()) for i in range(6)],
        language="cpp",
        compile_timeout=60,
    )
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    again = await real_engine.run_case(source, Case(stdin=b"echo again"), language="cpp")
    assert again.stdout == "again\n"
    assert real_engine._programs.compiles == before + 1


async def test_unknown_and_unserved_languages_are_refused(real_engine: Engine) -> None:
    with pytest.raises(LanguageUnavailable, match="unknown language 'cobol'"):
        await real_engine.run("x", language="cobol")
    missing = discover_languages().missing
    if missing:
        name = sorted(missing)[0]
        with pytest.raises(LanguageUnavailable, match=f"{name} is not served here"):
            await real_engine.run("x", language=name)


GUARD_C = r"""
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
static int processes(void) {
    int n = 0; struct dirent *e; DIR *d = opendir("/proc");
    while (d && (e = readdir(d))) n += isdigit((unsigned char)e->d_name[0]) != 0;
    return n;
}
int main(void) {
    char host[64] = "";
    gethostname(host, sizeof host);
    /* The driver is pid 1, this program its child: a pid namespace of their own. */
    if (getuid() != 1000 || strcmp(host, "corral") != 0 || getpid() > 8 || processes() > 3) {
        puts("refusing: not inside the corral sandbox");
        return 99;
    }
    puts("sandbox confirmed");
    printf("uid %d pid %d parent %d processes %d\n", getuid(), getpid(), getppid(), processes());
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {0};
    to.sin_family = AF_INET; to.sin_port = htons(80); to.sin_addr.s_addr = inet_addr("1.1.1.1");
    int c = connect(s, (struct sockaddr *)&to, sizeof to);
    printf("connect %d %s\n", c, c ? strerror(errno) : "connected");
    long m = syscall(SYS_mount, "none", "/work", "tmpfs", 0, 0);
    printf("mount %ld %s\n", m, m ? strerror(errno) : "mounted");
    long p = syscall(SYS_ptrace, 0, 0, 0, 0);
    printf("ptrace %ld %s\n", p, p ? strerror(errno) : "traced");
    long u = syscall(SYS_unshare, 0x10000000);
    printf("unshare %ld %s\n", u, u ? strerror(errno) : "unshared");
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    while (status && fgets(line, sizeof line, status))
        if (!strncmp(line, "Seccomp:", 8) || !strncmp(line, "NoNewPrivs:", 11)) fputs(line, stdout);
    return 0;
}
"""


async def test_a_compiled_program_is_isolated(real_engine: Engine) -> None:
    _served("cpp")
    result = await real_engine.run(GUARD_C, language="cpp", compile_timeout=60)
    assert result.stdout.startswith("sandbox confirmed\n"), (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[1].startswith("uid 1000 pid ")
    assert lines[1].endswith("parent 1 processes 2")
    assert lines[2] == "connect -1 Network is unreachable"  # no interface but a down loopback
    assert lines[3] == "mount -1 Operation not permitted"  # seccomp's EPERM
    assert lines[4] == "ptrace -1 Operation not permitted"
    assert lines[5] == "unshare -1 Operation not permitted"
    assert "Seccomp:\t2" in lines[6:]
    assert "NoNewPrivs:\t1" in lines[6:]


async def test_given_files_reach_the_compile_and_the_run(real_engine: Engine) -> None:
    _served("cpp")
    source = (
        '#include "twice.h"\n#include <fstream>\n#include <iostream>\n'
        'int main() { std::ifstream in("n.txt"); int n; in >> n; std::cout << twice(n) << "\\n";'
        ' std::ofstream("out.txt") << "made"; }\n'
    )
    for factor in (2, 3):  # another header is another program
        header = f"inline int twice(int n) {{ return {factor} * n; }}\n".encode()
        result = await real_engine.run(
            source, language="cpp", files={"twice.h": header, "n.txt": b"21"}, compile_timeout=60
        )
        assert (result.outcome, result.stdout) == ("ok", f"{21 * factor}\n"), result.stderr
        assert result.file_contents["out.txt"] == b"made"
        assert result.file_contents["twice.h"] == header  # given, not the artifact's


# The cache on its own: a stand-in compile (what a compile run answers), no sandbox.
def _languages() -> Languages:
    toolchain = Toolchain(
        language="cpp", source="main.cpp", compile=("g++", "main.cpp"), run=("./main",),
        env=(), binds=(), identity="test", limits=CompileLimits(), reports_compile=True,
        detail="",
    )  # fmt: skip
    return Languages({"cpp": toolchain}, {})


def _compiled_to(size: int) -> tuple[list[str], CompileRun]:
    seen: list[str] = []

    async def compile_run(code: str, files: Mapping[str, bytes], limits: Limits) -> ExecutionResult:
        seen.append(files["main.cpp"].decode())
        data = b"x" * size
        return ExecutionResult(
            outcome="ok",
            exit_code=0,
            files=(FileInfo("main", size, hashlib.sha256(data).hexdigest()),),
            file_contents={"main": data},
        )

    return seen, compile_run


async def test_the_cache_keeps_within_its_bytes_least_recently_used_first_out() -> None:
    # Room for two entries of 1000 bytes each (and each entry's own keep), not three.
    programs = Programs(_languages(), cache_bytes=2 * (1000 + 1024) + 500)
    seen, compile_run = _compiled_to(1000)

    async def prepare(source: str) -> None:
        program = await programs.prepare(
            "cpp", source, compile_timeout=5, base=LIMITS, compile_run=compile_run
        )
        assert isinstance(program, Program)
        assert program.files == {"main": b"x" * 1000}

    for source in ("a", "b", "a", "c", "a", "b"):
        await prepare(source)
    # "a" stays (used again), "b" is the least recently used when "c" comes, then again.
    assert seen == ["a", "b", "c", "b"]


async def test_callers_of_one_program_at_once_wait_for_one_compile() -> None:
    programs = Programs(_languages())
    seen, inner = _compiled_to(10)
    release = anyio.Event()

    async def slow(code: str, files: Mapping[str, bytes], limits: Limits) -> ExecutionResult:
        await release.wait()
        return await inner(code, files, limits)

    results: list[object] = []

    async def prepare() -> None:
        results.append(
            await programs.prepare("cpp", "same", compile_timeout=5, base=LIMITS, compile_run=slow)
        )

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(prepare)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert seen == ["same"]
    assert len(results) == 5
    assert all(isinstance(r, Program) for r in results)


async def test_failed_compiles_are_counted_in_the_cache_by_their_output() -> None:
    # A compile error keeps no artifact, only the compiler's output: it must still be
    # counted, or distinct bad programs would fill memory with no bound.
    programs = Programs(_languages(), cache_bytes=20_000)
    compiles: list[str] = []

    async def failing(code: str, files: Mapping[str, bytes], limits: Limits) -> ExecutionResult:
        compiles.append(files["main.cpp"].decode())
        return ExecutionResult(outcome="python_error", exit_code=1, stdout="é" * 2000)

    for source in ("a", "b", "c", "d", "a"):
        result = await programs.prepare(
            "cpp", source, compile_timeout=5, base=LIMITS, compile_run=failing
        )
        assert isinstance(result, ExecutionResult)
        assert result.compile is not None
    # Each keeps about 5 KB (2000 two-byte characters and the entry): "a" was dropped.
    assert compiles == ["a", "b", "c", "d", "a"]


async def test_callers_of_a_compile_that_is_not_kept_compile_one_at_a_time() -> None:
    # A compile past its time is not cached: each waiter then tries in turn, never two at
    # once, and every caller gets its answer.
    programs = Programs(_languages())
    running, most = [0], [0]

    async def timing_out(code: str, files: Mapping[str, bytes], limits: Limits) -> ExecutionResult:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await anyio.lowlevel.checkpoint()
        running[0] -= 1
        return ExecutionResult(outcome="timeout", message="out of time")

    results: list[object] = []

    async def prepare() -> None:
        results.append(
            await programs.prepare(
                "cpp", "same", compile_timeout=5, base=LIMITS, compile_run=timing_out
            )
        )

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(prepare)
    assert most == [1]
    assert programs.compiles == 3
    assert [getattr(r, "outcome", None) for r in results] == ["timeout"] * 3
