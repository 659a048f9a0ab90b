"""Inside a case server: a case of a program that is not Python, exec'd with no Python of its own.

A fresh run of such a program is a small Python driver (``corral.engine._programs``) that
writes nothing itself: it makes the program's files executable, spawns the program with the
run's stdin, stdout and stderr, removes the program's files and exits with its return code. A
case of a case server does the same without the driver's interpreter: the server, which runs
no user code, reads the case's request, writes its files (``begin``), starts the program and,
when it exits, reports it (``report``) as the driver would have: ``Done`` with the return code
(``-N`` for a signal) as ``exit_code``, a non-zero one as a ``SystemExit`` error, the files the
program left and its resource use.

How it starts the program is what a case costs. A fork of the server (a Python process)
copies its page tables, then both fault in copy-on-write every page either touches: measured,
about 3.5 ms of CPU per case, more than the program's own run. So the server takes the first
case's limits as its own, soft and hard (``adopt``: every case of a server has the same ones,
the engine sees to that, but for the CPU seconds its deadline rounds to), and ``spawn``s each
program, ``posix_spawn``'s ``CLONE_VFORK`` child sharing its memory until the exec, in a
session of its own with the case's descriptors as 0-2 and nothing else of the server's
(``seal_descriptors``). The program inherits what a driver would have given it: the server's
settings (checked pristine after every case, ``_pristine``), the run's rlimits (hard, so it
cannot raise them), and every wall of the sandbox (namespaces, uid 1000, no capabilities,
no_new_privs, the seccomp allowlist, the cgroup). The server's own CPU limit is then the
case's: it retires once it has used half of it, or has less than a second left (``tired``).
A server that cannot live within a case's limits (fewer than ``_SERVER_FILES`` descriptors)
forks each case instead, whose ``child`` lowers its own limits before the exec.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
from dataclasses import dataclass, replace

from corral.sandbox import _syscalls as sc
from corral.sandbox._case_protocol import HEAP_MB, Launch
from corral.sandbox._protocol import (
    Done,
    ErrorReport,
    RunLimits,
    RunRequest,
    Usage,
    encode_bytes,
    encode_message,
)
from corral.sandbox.inside import _feed, _isolate, _pristine
from corral.sandbox.inside._walk import collect_files
from corral.sandbox.inside._workdir import make_usable

__all__ = [
    "Begun",
    "adopt",
    "begin",
    "child",
    "not_started",
    "report",
    "same_bounds",
    "seal_descriptors",
    "spawn",
    "tired",
]

_EXECUTABLE = 0o755
_MIB = 1024 * 1024
_DEFAULT_HEAP_MB = 1024  # a JVM's heap when nothing bounds the address space
_LEAST_HEAP_MB = 32
_STDERR = 2
_SERVER_FILES = 32
"""Descriptors a case server needs of its own (control and case sockets, pipes, a selector,
a pidfd, the restore's walk): with fewer, its cases are forked and lower their own limits."""
_TIRED_SHARE = 0.5  # of its CPU limit a server may use before it retires
_LEAST_CPU_LEFT_SECONDS = 1.0  # of its CPU limit a server keeps for a case's report and restore
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RESTORED_SIGNALS = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")
"""What Python ignores at start and ``subprocess`` puts back before an exec: an ignored signal
stays ignored across ``execve``."""


@dataclass(frozen=True, slots=True)
class Begun:
    """A case made ready to exec: its stdin's descriptor (None: the server's own, at EOF) and
    the arguments the request adds to the command."""

    stdin: int | None
    extra_argv: tuple[str, ...]


def begin(launch: Launch, request: RunRequest, cwd: str, stderr: int) -> Begun:
    """Write the case's files into ``cwd``, make the program executable, ready its stdin.

    Runs in the server, while no process of any case is left (the last one was killed,
    reaped and its folders restored), so nothing can move a path under it.
    """
    make_usable(cwd)
    _feed.place_files(request.files, cwd, stderr)
    for name in launch.executables:
        with contextlib.suppress(OSError):  # not in the request: the exec says so
            os.chmod(os.path.join(cwd, name), _EXECUTABLE)
    stdin = None if request.stdin is None else _feed.stdin_fd(request.stdin)
    return Begun(stdin, tuple(request.argv[1:]) if request.argv else ())


def _argv(launch: Launch, extra: tuple[str, ...]) -> list[str]:
    argv = [*launch.argv, *extra]
    if not any(HEAP_MB in arg for arg in argv):
        return argv
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    with open("/proc/self/statm", "rb") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    heap = _DEFAULT_HEAP_MB if limit == resource.RLIM_INFINITY else (limit - mapped) // _MIB
    heap_mb = str(max(_LEAST_HEAP_MB, heap - launch.heap_overhead_mb))
    return [arg.replace(HEAP_MB, heap_mb) for arg in argv]


def adopt(limits: RunLimits) -> bool:
    """Make the case's limits the server's own (soft and hard), so that the programs it
    spawns inherit them as a fresh run's driver would have passed them on; False, and
    nothing changed, when the server could not work within them (too few descriptors)."""
    if limits.open_files < _SERVER_FILES:
        return False
    _isolate.bound_run_to(limits, session=False)
    _pristine.forbid_message_queues()
    return True


def same_bounds(adopted: RunLimits, limits: RunLimits) -> bool:
    """Whether a case with ``limits`` may run under the ``adopted`` ones: the same, but for
    the CPU seconds its deadline rounds to (at most the adopted ones)."""
    return replace(limits, cpu_seconds=adopted.cpu_seconds) == adopted and (
        limits.cpu_seconds <= adopted.cpu_seconds
    )


def tired(adopted: RunLimits) -> bool:
    """Whether the server has used so much of its own CPU limit (the adopted one) that a
    case could see it killed: the engine then takes a new server."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    used = own.ru_utime + own.ru_stime
    return used > adopted.cpu_seconds * _TIRED_SHARE or (
        adopted.cpu_seconds - used < _LEAST_CPU_LEFT_SECONDS
    )


def not_started(exc: OSError, stderr: int) -> list[bytes]:
    """The report of a case whose program the kernel would not run (not an executable, a
    format it does not know): an error of the run, said on its stderr, as the driver's
    spawn would have raised it."""
    with contextlib.suppress(OSError):
        os.write(stderr, f"corral: cannot run the program: {exc}\n".encode(errors="replace"))
    done = Done(error=ErrorReport(type(exc).__name__, str(exc), ""))
    return [encode_message(done)]


def seal_descriptors() -> None:
    """Mark every descriptor past stdio close-on-exec: a spawned program gets only the
    case's three, which the spawn puts in place."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > _STDERR:
            with contextlib.suppress(OSError):  # the listing's own descriptor, now closed
                os.set_inheritable(fd, False)


def spawn(launch: Launch, begun: Begun, stdout: int, stderr: int, cwd: str) -> int:
    """Start the program with the server's settings and limits (``adopt``) in a session of
    its own, the case's descriptors as 0-2; its pid.

    A spawn shares the server's memory until the exec (``CLONE_VFORK``): no page tables are
    copied and no page of either is faulted in copy-on-write, which is most of what a fork
    of a Python process costs.
    """
    actions: list[tuple[int, int, int]] = []
    if begun.stdin is not None:
        actions.append((os.POSIX_SPAWN_DUP2, begun.stdin, 0))
    actions += [(os.POSIX_SPAWN_DUP2, stdout, 1), (os.POSIX_SPAWN_DUP2, stderr, _STDERR)]
    env = {**os.environ, **dict(launch.env)}
    argv = _argv(launch, begun.extra_argv)
    os.chdir(cwd)
    return os.posix_spawn(
        _resolve(argv[0], env),
        argv,
        env,
        file_actions=actions,
        setsid=True,  # its own autogroup, as a fresh worker's
        setsigdef=_restored_signals(),
    )


def _resolve(command: str, env: dict[str, str]) -> str:
    """``command`` as ``subprocess`` finds it: a path as given, else on the run's PATH."""
    if "/" in command:
        return command
    return shutil.which(command, path=env.get("PATH", os.defpath)) or command


def _restored_signals() -> tuple[int, ...]:
    return tuple(getattr(signal, name) for name in _RESTORED_SIGNALS if hasattr(signal, name))


def child(
    launch: Launch,
    request: RunRequest,
    begun: Begun,
    stdout: int,
    stderr: int,
    cwd: str,
    pristine: _pristine.Pristine,
) -> None:
    """In a forked child, for a server that could not adopt the case's limits: take the
    case's descriptors and settings, lower the limits, exec the program.

    Returns only by raising (the exec failed); the caller exits.
    """
    if begun.stdin is not None:
        os.dup2(begun.stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, _STDERR)
    os.closerange(_STDERR + 1, 1 << 20)  # the server's control socket, the case's socket
    for number in _restored_signals():
        signal.signal(number, signal.SIG_DFL)
    _pristine.apply(pristine)
    os.setsid()
    _pristine.forbid_message_queues()
    _isolate.bound_run_to(request.limits, session=False)
    os.chdir(cwd)
    sc.set_dumpable(True)
    env = {**os.environ, **dict(launch.env)}
    argv = _argv(launch, begun.extra_argv)
    os.execve(_resolve(argv[0], env), argv, env)  # noqa: S606 - the program, as the driver


def _remove(cwd: str, name: str) -> None:
    """Unlink ``cwd/name`` without following a link the program put on the way."""
    *folders, leaf = name.split("/")
    fd = os.open(cwd, _DIR_FLAGS)
    try:
        for folder in folders:
            inner = os.open(folder, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.unlink(leaf, dir_fd=fd)
    finally:
        os.close(fd)


def report(
    launch: Launch, request: RunRequest, status: int, usage: resource.struct_rusage, cwd: str
) -> list[bytes]:
    """The frames of the case's report, once the program has exited with ``status`` (a wait
    status) and every process of the case is gone."""
    for name in launch.artifact:
        with contextlib.suppress(OSError, ValueError):  # the program removed or replaced it
            _remove(cwd, name)
    make_usable(cwd)
    limits = request.limits
    collected = collect_files(cwd, limits.max_files, limits.max_file_bytes)
    code = os.waitstatus_to_exitcode(status)
    done = Done(
        error=None if code == 0 else ErrorReport("SystemExit", str(code), ""),
        files=tuple(collected.files),
        files_omitted=collected.omitted,
        exit_code=code,
        usage=Usage((usage.ru_utime + usage.ru_stime) * 1000.0, usage.ru_maxrss),
    )
    return [encode_message(done), *(encode_bytes(c) for c in collected.contents)]
