"""A program in another language as the engine runs it: compiled once in a sandbox, each run
a small Python driver in a fresh worker that execs it, or a case server's spawn of it.

Why a driver: a worker already has every wall (its own user, pid, mount, network, ipc and uts
namespaces, uid 1000, no capabilities, no_new_privs, the seccomp allowlist, rlimits, a cgroup
bounding all its processes), and an exec'd program inherits all of them: seccomp filters,
namespaces, rlimits and the cgroup survive ``execve``. The driver is the run's code, so the
one run path (scheduler, deadline, bounded reader, outcomes) serves other languages
unchanged. The driver exits with the program's return code (``-N`` for a signal, as Python
reports it) and removes the program's files first, so a run reports only what the program
wrote. A case server needs no driver: given the program's ``Launch`` (``launch``), each case
is a spawn of the program by the server itself, reported as the driver would have
(``corral.sandbox.inside._exec_case``); a fresh run (a first ``/run_code``) runs the driver.

Compiling is a run as well: a fresh worker with the toolchain's ``CompileLimits`` and the
caller's ``compile_timeout``, the source as its one file. What the compiler leaves in the
working folder comes back as the run's file bytes, read over the worker protocol (never from
a path the sandbox could have linked elsewhere), and is kept in memory, keyed by the source,
the toolchain's identity and its flags, within ``cache_bytes``. A compile error is cached too
(it is the same error next time); a compile cut short by time or memory is not. Callers of
the same program at once wait for one compile.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

import anyio

from corral._limits import Limits
from corral.engine._feed import Feed
from corral.engine._languages import HEAP, Languages, Toolchain
from corral.engine._result import CompileInfo, ErrorInfo, ExecutionResult
from corral.engine._runs import RunOptions, Runs, Target
from corral.sandbox import HEAP_MB, Launch

__all__ = ["DEFAULT_CACHE_BYTES", "Program", "Programs", "fresh_compile", "with_compile"]

_MIB = 1024 * 1024
DEFAULT_CACHE_BYTES = 256 * _MIB
"""Compiled artifacts kept in memory, all together; the least recently used go first."""
_COMPILE_FILES = 256  # files a compile may leave (javac: a class file per class)
_ENTRY_BYTES = 1024  # what a cached entry costs besides its files and output (key, objects)
_EXECUTABLE = 0o755

CompileRun = Callable[[str, Mapping[str, bytes], Limits], Awaitable[ExecutionResult]]
"""Runs a compile driver in a fresh worker: code, files, limits."""


@dataclass(frozen=True, slots=True)
class Program:
    """What a run of the program needs: the driver, its files, and how its compile went."""

    code: str
    files: Mapping[str, bytes]
    compiled: CompileInfo | None
    launch: Launch
    """What a case server execs for each case in place of the driver (same run, no Python)."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    files: Mapping[str, bytes]
    info: CompileInfo

    @property
    def size(self) -> int:
        """Bytes it holds: its files and the compiler's output (a failed compile keeps only
        that), and an entry's own keep, so that no entry is free."""
        output = len(self.info.stdout.encode("utf-8", "surrogatepass")) + len(
            self.info.stderr.encode("utf-8", "surrogatepass")
        )
        return _ENTRY_BYTES + sum(len(d) for d in self.files.values()) + output


def fresh_compile(
    runs: Runs, target: Target, tenant: str, queue_timeout: float | None
) -> CompileRun:
    """Compiles as one-shot runs on ``target`` (fresh workers), through the one run path."""

    async def compile_run(code: str, files: Mapping[str, bytes], limits: Limits) -> ExecutionResult:
        options = RunOptions(
            limits=limits, tenant=tenant, feed=Feed(None, files), queue_timeout=queue_timeout
        )
        return await runs.run(target, code, options)

    return compile_run


def with_compile(result: ExecutionResult, program: Program | None) -> ExecutionResult:
    """``result`` of a run of ``program``, saying how its compile went."""
    if program is None or program.compiled is None:
        return result
    return replace(result, compile=program.compiled)


_JVM_OVERHEAD_MB = 720
"""Address space a JVM maps besides its heap (code cache, class space, CDS, thread stacks,
malloc arenas): measured at about 650 MiB for a 1 GiB heap on OpenJDK 17."""
_HEAP_LINES = (
    "import resource\n"
    "limit = resource.getrlimit(resource.RLIMIT_AS)[0]\n"
    "with open('/proc/self/statm') as statm:\n"
    "    mapped = int(statm.read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
    "heap = 1024 if limit == resource.RLIM_INFINITY else (limit - mapped) // 2**20\n"
    f"argv = [a.replace({HEAP_MB!r}, str(max(32, heap - {_JVM_OVERHEAD_MB}))) for a in argv]\n"
)
"""For a JVM: its heap from the address space this process may still map (RLIMIT_AS is
``Limits.memory_bytes`` over what the worker had mapped; the cgroup bounds the sum)."""


def _argv_lines(argv: tuple[str, ...]) -> str:
    lines = f"argv = {list(argv)!r}\n"
    return lines + (_HEAP_LINES if any(HEAP in a for a in argv) else "")


def _executables(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in names if "/" not in n and not n.endswith((".class", ".js", ".sh")))


def launch(toolchain: Toolchain, names: tuple[str, ...]) -> Launch:
    """What a case server execs for a run of the program: what the driver runs, as it would."""
    return Launch(
        argv=toolchain.run,
        env=toolchain.env,
        executables=_executables(names),
        artifact=names,
        heap_overhead_mb=_JVM_OVERHEAD_MB,
    )


def run_driver(toolchain: Toolchain, digest: str, names: tuple[str, ...]) -> str:
    """The Python a worker runs for one run of the program (imports only the standard
    library, so the lean zygote serves it)."""
    executables = list(_executables(names))
    return (
        f"# corral: {toolchain.language} program {digest}\n"
        "import os, subprocess, sys\n"
        f"for name in {executables!r}:\n"
        f"    os.chmod(name, {_EXECUTABLE:#o})\n"
        f"env = {{**os.environ, **{dict(toolchain.env)!r}}}\n"
        + _argv_lines(toolchain.run)
        + "code = subprocess.run(argv + sys.argv[1:], env=env).returncode\n"
        f"for name in {list(names)!r}:\n"
        "    try:\n"
        "        os.unlink(name)\n"
        "    except OSError:\n"
        "        pass\n"
        "sys.exit(code)\n"
    )


def _compile_driver(toolchain: Toolchain) -> str:
    return (
        f"# corral: compile {toolchain.language}\n"
        "import os, subprocess, sys\n"
        f"env = {{**os.environ, **{dict(toolchain.env)!r}}}\n"
        + _argv_lines(toolchain.compile)
        + "done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL)\n"
        "try:\n"
        f"    os.unlink({toolchain.source!r})\n"
        "except OSError:\n"
        "    pass\n"
        "left, here = 0, os.stat('.').st_dev\n"
        "for top, dirs, files in os.walk('.'):\n"  # not into the runtime's binds under /work
        "    dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == here]\n"
        "    left += len(files)\n"
        f"if done.returncode == 0 and left > {_COMPILE_FILES}:\n"
        f"    sys.exit(f'corral: the compile left {{left}} files; at most {_COMPILE_FILES}')\n"
        "sys.exit(done.returncode)\n"
    )


def _seconds(result: ExecutionResult) -> float:
    return round(max(0.0, result.elapsed_ms - result.queued_ms) / 1000.0, 6)


def _compile_info(result: ExecutionResult) -> CompileInfo:
    """SandboxFusion's ``compile_result`` for a compile run."""
    seconds = _seconds(result)
    if result.outcome == "timeout":
        return CompileInfo("TimeLimitExceeded", None, seconds, result.stdout, result.stderr)
    if result.outcome == "python_error" and result.exit_code is None:
        # The driver itself raised (it only ever exits with the compiler's code).
        return CompileInfo("Error", None, seconds, result.stdout, result.stderr)
    if result.outcome in ("ok", "python_error", "memory_limit"):
        code = result.exit_code
        if result.outcome == "ok":
            code = 0
        elif code is None or code == 0:
            code = -9  # killed (its memory) before it could say: SIGKILL, as Python reports it
        stderr = result.stderr
        if result.outcome == "memory_limit":
            stderr += f"corral: the compiler ran out of memory ({result.message})\n"
        return CompileInfo("Finished", code, seconds, result.stdout, stderr)
    return CompileInfo("Error", None, seconds, result.stdout, result.message or result.stderr)


class Programs:
    """Compiles programs in sandboxes and keeps what they compiled to."""

    def __init__(self, languages: Languages, *, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.languages = languages
        self._cache: OrderedDict[str, _Compiled] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._held = 0
        self._compiling: dict[str, anyio.Event] = {}
        self.compiles = 0
        """Compiles run (cache misses), for statistics and tests."""

    def _key(self, toolchain: Toolchain, source: str, given: Mapping[str, bytes]) -> str:
        digest = hashlib.sha256(toolchain.identity.encode())
        digest.update(b"\0" + source.encode("utf-8", "surrogatepass"))
        for name in sorted(given):  # headers a compile may include
            digest.update(b"\0%s\0%s" % (name.encode(), hashlib.sha256(given[name]).digest()))
        return digest.hexdigest()

    async def prepare(
        self,
        language: str,
        source: str,
        *,
        compile_timeout: float,
        base: Limits,
        compile_run: CompileRun,
        given: Mapping[str, bytes] | None = None,
    ) -> Program | ExecutionResult:
        """The program to run for ``source``, or the failed compile's result (outcome
        ``python_error`` with ``compile`` set, or the compile run's own failure).

        ``given`` are the caller's files: in the compile's working folder too (as
        SandboxFusion writes them before it compiles: a header the program includes), part
        of the artifact's key, never part of the artifact.

        Raises:
            LanguageUnavailable: unknown language, or no toolchain for it here.
        """
        toolchain = self.languages.get(language)
        if len(source) > base.code_chars:
            message = f"the program has {len(source)} characters; the limit is {base.code_chars}"
            return ExecutionResult(outcome="invalid_input", message=message)
        given = dict(given or {})
        key = self._key(toolchain, source, given)
        if not toolchain.compiled:
            files = {toolchain.source: source.encode("utf-8", "surrogatepass")}
            names: tuple[str, ...] = (toolchain.source,)
            return Program(
                run_driver(toolchain, key[:16], names), files, None, launch(toolchain, names)
            )
        compiled = await self._compiled(
            toolchain, key, source, given, compile_timeout, base, compile_run
        )
        if isinstance(compiled, ExecutionResult):
            return compiled
        info = compiled.info
        if info.return_code != 0 and not toolchain.reports_compile and info.return_code:
            # As a run of it would have failed (SandboxFusion runs it without a compile step).
            return ExecutionResult(
                outcome="python_error",
                stderr=info.stdout + info.stderr,  # tsc reports on stdout; a run, on stderr
                error=ErrorInfo("SystemExit", str(info.return_code), ""),
                exit_code=info.return_code,
            )
        if info.return_code != 0:
            timed_out = info.status == "TimeLimitExceeded"
            return ExecutionResult(
                outcome="timeout" if timed_out else "python_error",
                message=f"the compile exceeded its {compile_timeout:g} s" if timed_out else "",
                stdout=info.stdout,
                stderr=info.stderr,
                error=ErrorInfo("CompileError", f"the compiler exited {info.return_code}", ""),
                exit_code=info.return_code,
                compile=info,
            )
        names = tuple(sorted(compiled.files))
        shown = info if toolchain.reports_compile else None
        return Program(
            run_driver(toolchain, key[:16], names), compiled.files, shown, launch(toolchain, names)
        )

    async def _compiled(
        self,
        toolchain: Toolchain,
        key: str,
        source: str,
        given: Mapping[str, bytes],
        compile_timeout: float,
        base: Limits,
        compile_run: CompileRun,
    ) -> _Compiled | ExecutionResult:
        while True:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
            running = self._compiling.get(key)
            if running is None:
                break
            # One compile per program at a time; then look again: cached, or (it did not
            # compile in its time or memory) the first waiter to look tries with its own.
            await running.wait()
        done = self._compiling[key] = anyio.Event()
        try:
            result = await self._compile(
                toolchain, source, given, compile_timeout, base, compile_run
            )
            if isinstance(result, _Compiled):
                code = result.info.return_code
                if code is not None and code >= 0:  # not cut short by a signal (its memory)
                    self._keep(key, result)
            return result
        finally:
            if self._compiling.get(key) is done:
                del self._compiling[key]
            done.set()

    async def _compile(
        self,
        toolchain: Toolchain,
        source: str,
        given: Mapping[str, bytes],
        compile_timeout: float,
        base: Limits,
        compile_run: CompileRun,
    ) -> _Compiled | ExecutionResult:
        bounds = toolchain.limits
        limits = base.replace(
            timeout=compile_timeout,
            memory_bytes=bounds.memory_bytes,
            pids=max(base.pids, bounds.pids),
            output_chars=bounds.output_chars,
            max_files=_COMPILE_FILES,
            max_file_bytes=bounds.artifact_bytes,
            file_bytes=max(base.file_bytes, bounds.artifact_bytes),
        )
        files = {**given, toolchain.source: source.encode("utf-8", "surrogatepass")}
        self.compiles += 1
        result = await compile_run(_compile_driver(toolchain), files, limits)
        info = _compile_info(result)
        if info.status == "Error" or result.outcome == "busy":
            return replace(result, compile=info)
        artifact: dict[str, bytes] = {}
        if info.return_code == 0:
            listed = {f.path for f in result.files if f.path not in given}
            artifact = {p: d for p, d in result.file_contents.items() if p in listed}
            if len(artifact) != len(listed) or not artifact:
                stderr = info.stderr + "corral: the compiled program is larger than its bound\n"
                info = replace(info, return_code=1, stderr=stderr)
                artifact = {}
        return _Compiled(artifact, info)

    def _keep(self, key: str, compiled: _Compiled) -> None:
        if compiled.size > self._cache_bytes:
            return
        self._cache[key] = compiled
        self._held += compiled.size
        while self._held > self._cache_bytes:
            _old, dropped = self._cache.popitem(last=False)
            self._held -= dropped.size
