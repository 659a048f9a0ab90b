"""Inside a case server: one program compiled once, each of its cases run in a forked child.

``/run_code_batch`` runs one program against many test cases. A fresh worker per case pays
for a new interpreter state each time: importing what the program imports, compiling it. A
case server pays that once and forks each case from the prepared state.

What it is: a normal fresh one-shot worker from the zygote, in its own namespaces under its
own host uid, with every capability dropped, no_new_privs, the seccomp allowlist and the
static rlimits, as any worker, before it hears of the batch. Asked (``CasesRequest``) instead
of a ``RunRequest``, it

* checks it is init of its own pid namespace (pid 1), or refuses: it kills with
  ``kill(-1)``, which outside a sandbox would reach every process of its uid;
* becomes non-dumpable and keeps no signal handler: a child can neither trace it (ptrace and
  ``process_vm_*`` are refused by the policy, ``/proc/1/mem`` by non-dumpability) nor signal
  it (the kernel delivers a signal from inside a pid namespace to its init only when init
  handles it, and SIGKILL and SIGSTOP never);
* prepares the program once in the namespace its cases inherit (``_prepare``): compiled,
  its standard-library imports imported, its leading imports run;
* records its writable folders (``/work``, ``/tmp``, ``/dev/shm``: entries, modes, owners,
  extended attributes, times; ``_restore``) and its own process settings (rlimits,
  scheduling, nice value, affinity; ``_pristine``, which also says why cases share the
  server's uid rather than get one of their own).

Per case (``CaseStart``, with the case's protocol socket and its stdout and stderr pipes) it
forks a plain child: no namespace flags, which the policy allows. The child takes the three
descriptors as fds 3, 1 and 2 and nothing else of the server's, becomes dumpable again (its
own /proc/self, as subprocess needs), sets its rlimits, scheduling policy, nice value and
affinity from the server's pristine copy, reseeds its random generators and serves the case's
``RunRequest`` as a fresh worker does: same limits (lowered for the child alone), same stdin
and files, same cell semantics, same fitting, same report. Fresh Python state comes by fork:
the server never runs user code. The child's exit ends the case's processes, as a fresh
worker's exit does: the server kills every other process of the namespace. The case ends on
``CaseStop`` from the engine, or when the server's own timer, a little past the case's
deadline, runs out. Then the server kills every process but itself, reaps them, checks that
its own settings are still the pristine ones (a case, of its uid, may have changed them on
pid 1), wipes what the case left in the writable folders and puts back the attributes of
what it did not make (a mount point, the runtime's read-only binds, is never entered),
removes System V IPC objects, and answers ``CaseEnded``. Settings that changed, or folders it
cannot restore exactly, or not within ``RESTORE_SECONDS`` (the engine has given the case's
slot back by then), make it answer ``clean=False`` and exit: the engine then takes a new
server.

A program that is not Python comes as a ``Launch`` (``_exec_case``): the server prepares no
code, and per case it reads the case's request itself, writes its files, spawns the program
with the case's descriptors as 0-2 (no Python child, no driver) and reports the run when it
exits; the end of the case is the same.

Not made fresh between cases (as they are not between two fresh workers either): the hash
seed and anything else fixed before the zygote forked. A POSIX message queue could not be
listed (that takes mounting ``mqueue``), so it could not be removed after its case: a case
may create none (``RLIMIT_MSGQUEUE`` 0). What else differs from a fresh worker: the case is
not pid 1 of its namespace (the server is), the server counts against its ``pids``, and the
network namespace is the server's: sockets die with their processes, but a TCP connection a
case closed may linger in TIME_WAIT, so a later case binding that very port needs
``SO_REUSEADDR``, as on any host.
"""

from __future__ import annotations

import array
import contextlib
import functools
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.sandbox import _syscalls as sc
from corral.sandbox._case_protocol import (
    CASE_FDS,
    CaseEnded,
    CasesRequest,
    CaseStart,
    CaseStop,
    Launch,
    decode_server_command,
    encode_case_message,
)
from corral.sandbox._protocol import (
    HEADER,
    MAX_CONTROL_FRAME,
    MAX_REQUEST,
    RunLimits,
    RunRequest,
    Started,
    decode_request,
    encode_message,
    read_frame_sync,
    write_frames_sync,
)
from corral.sandbox.inside import _exec_case, _pristine, _restore
from corral.sandbox.inside._cell import Cell
from corral.sandbox.inside._child import run_then_exit
from corral.sandbox.inside._prepare import prepare

__all__ = ["serve_cases"]

RunCase = Callable[[Cell | None, Callable[[], None] | None], None]
"""The runner's one-shot run of a case in the child (reads its request from fd 3), given the
compiled code and what to call just before the code runs."""

_PROTOCOL_FD = 3
_FD_BYTES = 4
_OWN_TIMER_MARGIN = 1.0  # seconds past the case's deadline before the server kills on its own
_LEAST_SEND_SECONDS = 0.05  # for a report past the case's own time: the engine still reads
_STARTED = encode_message(Started())


def _kill_all() -> None:
    """Kill every process of the namespace but this one (we are its init)."""
    if os.getpid() != 1:  # checked at the start too: kill(-1) outside a sandbox is a disaster
        raise RuntimeError("not init of a pid namespace")
    with contextlib.suppress(ProcessLookupError):  # nobody else left
        os.kill(-1, signal.SIGKILL)


def _reap_all() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _receive(control: socket.socket) -> tuple[bytes | None, list[int]]:
    """One frame from the engine and the descriptors that came with it; None at EOF."""
    fds: list[int] = []

    def exact(size: int) -> bytes | None:
        data = bytearray()
        while len(data) < size:
            chunk, ancillary, _flags, _addr = control.recvmsg(
                size - len(data), socket.CMSG_SPACE(CASE_FDS * _FD_BYTES)
            )
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(raw[: len(raw) - len(raw) % _FD_BYTES])
                    fds.extend(received)
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    header = exact(HEADER.size)
    if header is not None:
        size, kind = HEADER.unpack(header)
        if size <= MAX_CONTROL_FRAME and kind == ord("J"):
            payload = exact(size)
            if payload is not None:
                return payload, fds
    for fd in fds:
        os.close(fd)
    return None, []


def _stop_asked(control: socket.socket) -> bool | None:
    """Whether the engine's message ends the case; None when the engine has gone."""
    payload, extra = _receive(control)
    for fd in extra:
        os.close(fd)
    if payload is None:
        return None
    return isinstance(decode_server_command(payload), CaseStop)


def _child(fds: list[int], run: Callable[[], None], pristine: _pristine.Pristine) -> None:
    for fd, target in zip(fds, (_PROTOCOL_FD, 1, 2), strict=True):
        os.dup2(fd, target)
    os.closerange(_PROTOCOL_FD + 1, 1 << 20)  # the server's control socket among them
    sc.set_dumpable(True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _pristine.apply(pristine)
    os.setsid()  # its own autogroup: one whose nice value the case may raise dies with it
    _pristine.forbid_message_queues()
    run()


def _one_case(
    start: CaseStart,
    fds: list[int],
    control: socket.socket,
    run: Callable[[], None],
    baseline: _restore.Baseline,
    pristine: _pristine.Pristine,
) -> CaseEnded | None:
    """Run one case to its end; None when the engine has gone away."""

    pid = os.fork()
    if pid == 0:
        run_then_exit("case", lambda: _child(fds, run, pristine))
    for fd in fds:
        os.close(fd)
    deadline = time.monotonic() + start.seconds + _OWN_TIMER_MARGIN
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        pidfd = os.pidfd_open(pid)
        selector.register(pidfd, selectors.EVENT_READ)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                events = selector.select(remaining)
                if any(key.fd == pidfd for key, _ in events):
                    # As when a fresh worker exits: nothing the case started outlives it.
                    _kill_all()
                    selector.unregister(pidfd)
                if any(key.fileobj is control for key, _ in events):
                    asked = _stop_asked(control)
                    if asked is None:
                        return None
                    if asked:
                        break
        finally:
            os.close(pidfd)
            _kill_all()
            _reap_all()
    return CaseEnded(timed_out=timed_out, clean=_clean(baseline, pristine))


@dataclass(slots=True)
class _Launching:
    """A launch server's state across its cases: the limits it took (``_exec_case.adopt``) from
    its first case, or that it could not (its cases are then forked), and its settings."""

    pristine: _pristine.Pristine
    adopted: RunLimits | None = None
    forking: bool = False


def _one_launched(
    start: CaseStart,
    fds: list[int],
    control: socket.socket,
    launch: Launch,
    cwd: str,
    baseline: _restore.Baseline,
    state: _Launching,
) -> CaseEnded | None:
    """Run one case of a ``launch`` to its end (``_exec_case``); None when the engine has gone.

    The server reads the case's request, starts the program, and reports on the case's socket
    once it exits; the engine's ``CaseStop`` ends the case, as for any.
    """
    case_fd, stdout, stderr = fds
    held = list(fds)  # the server lets go of the output pipes once the program has them
    for fd in fds:  # a spawned program gets them only as its 0-2
        os.set_inheritable(fd, False)
    deadline = time.monotonic() + start.seconds + _OWN_TIMER_MARGIN
    timed_out = False
    request: RunRequest | None = None
    pid, pidfd = 0, -1
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        selector.register(case_fd, selectors.EVENT_READ)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                ready = {key.fd for key, _ in selector.select(remaining)}
                if case_fd in ready:
                    selector.unregister(case_fd)  # one request per case, nothing after it
                    request = _request(case_fd)
                    stdin, failed = None, None
                    if request is not None:
                        begun = _exec_case.begin(launch, request, cwd, stderr)
                        stdin = begun.stdin
                        if stdin is not None:
                            held.append(stdin)
                        _send(case_fd, [_STARTED], deadline)
                        try:
                            pid = _start(launch, request, begun, stdout, stderr, cwd, state)
                        except OSError as exc:  # not a program the kernel runs: the run's error
                            failed = _exec_case.not_started(exc, stderr)
                        else:
                            pidfd = os.pidfd_open(pid)
                            held.append(pidfd)
                            selector.register(pidfd, selectors.EVENT_READ)
                    _let_go(held, (stdout, stderr, stdin))  # the program has them, or none will
                    if failed is not None:
                        _send(case_fd, failed, deadline)
                if pidfd in ready:
                    selector.unregister(pidfd)
                    _pid, status, usage = os.wait4(pid, 0)
                    _kill_all()  # as when a fresh worker exits: nothing of the case outlives it
                    _reap_all()
                    assert request is not None
                    _send(case_fd, _exec_case.report(launch, request, status, usage, cwd), deadline)
                if control.fileno() in ready:
                    asked = _stop_asked(control)
                    if asked is None:
                        return None
                    if asked:
                        break
        finally:
            _kill_all()
            _reap_all()
            _let_go(held, tuple(held))
    clean = _clean(baseline, state.pristine)
    return CaseEnded(
        timed_out=timed_out,
        clean=clean and (state.adopted is None or not _exec_case.tired(state.adopted)),
    )


def _start(
    launch: Launch,
    request: RunRequest,
    begun: _exec_case.Begun,
    stdout: int,
    stderr: int,
    cwd: str,
    state: _Launching,
) -> int:
    """The program's pid: spawned under the limits the server took from its first case, or
    forked (when it could not take them, or this case's differ) to lower its own."""
    if state.adopted is None and not state.forking:
        if _exec_case.adopt(request.limits):
            state.adopted = request.limits
            state.pristine = _pristine.capture()
        else:
            state.forking = True
    if state.adopted is not None and _exec_case.same_bounds(state.adopted, request.limits):
        return _exec_case.spawn(launch, begun, stdout, stderr, cwd)
    pid = os.fork()
    if pid == 0:
        run_then_exit(
            "case",
            lambda: _exec_case.child(launch, request, begun, stdout, stderr, cwd, state.pristine),
        )
    return pid


def _let_go(held: list[int], fds: tuple[int | None, ...]) -> None:
    """Close those of ``fds`` still in ``held`` (None: no descriptor)."""
    for fd in fds:
        if fd is not None and fd in held:
            held.remove(fd)
            os.close(fd)


def _request(case_fd: int) -> RunRequest | None:
    """The case's request, or None when the engine hung up on the case without one."""
    try:
        return decode_request(read_frame_sync(case_fd, MAX_REQUEST))
    except (EOFError, OSError, ValueError, KeyError, TypeError, MemoryError):
        return None


def _send(case_fd: int, frames: list[bytes], deadline: float) -> None:
    """Write ``frames`` on the case's socket, giving up by the case's deadline: an engine that
    stopped reading has ended the case, and a late report is no longer anyone's."""
    with socket.socket(fileno=os.dup(case_fd)) as sock:
        sock.settimeout(max(_LEAST_SEND_SECONDS, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            for frame in frames:
                sock.sendall(frame)


def _clean(baseline: _restore.Baseline, pristine: _pristine.Pristine) -> bool:
    """Whether the next case may fork from this server (every process of the last one is
    gone): its own settings as prepared, its folders and IPC put back."""
    try:
        if _pristine.changed(pristine):
            return False
        return _restore.restore(baseline) and _restore.remove_sysv_ipc()
    except (OSError, ValueError):  # a setting it cannot read, a malformed IPC table
        return False


def serve_cases(
    request: CasesRequest, namespace: dict[str, Any], run_case: RunCase, cwd: str
) -> None:
    """Be a case server for ``request.code`` (or its ``launch``) until the engine closes the
    socket.

    Called by the runner in a locked-down one-shot worker, in place of its one run;
    ``namespace`` is the one each case runs in (``run_case`` has it too), ``cwd`` the working
    folder.
    """
    if os.getpid() != 1:
        raise RuntimeError("a case server must be init of its own pid namespace")
    sc.set_dumpable(False)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: no signal from a case lands
    launch = request.launch
    run = None if launch else functools.partial(run_case, *prepare(request.code, namespace))
    if launch is not None:
        _exec_case.seal_descriptors()
    baseline = _restore.snapshot()
    pristine = _pristine.capture()
    launching = _Launching(pristine)
    control = socket.socket(fileno=_PROTOCOL_FD)
    control.setblocking(True)
    for stream in (sys.stdout, sys.stderr):  # children inherit the objects, not our buffers
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    while True:
        payload, fds = _receive(control)
        if payload is None:
            return
        command = decode_server_command(payload)
        if not isinstance(command, CaseStart) or len(fds) != CASE_FDS:
            for fd in fds:  # a late CaseStop for a case our own timer ended
                os.close(fd)
            continue
        if launch is not None:
            ended = _one_launched(command, fds, control, launch, cwd, baseline, launching)
        else:
            assert run is not None
            ended = _one_case(command, fds, control, run, baseline, pristine)
        if ended is None:
            return
        write_frames_sync(_PROTOCOL_FD, encode_case_message(ended))
        if not ended.clean:
            return
