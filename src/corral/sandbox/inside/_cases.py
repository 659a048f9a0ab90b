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
import resource
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from corral.sandbox import _syscalls as sc
from corral.sandbox._case_protocol import (
    CASE_FDS,
    CaseEnded,
    CasesRequest,
    CaseStart,
    CaseStop,
    decode_server_command,
    encode_case_message,
)
from corral.sandbox._protocol import HEADER, MAX_CONTROL_FRAME, write_frames_sync
from corral.sandbox.inside import _pristine, _restore
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


def _child(fds: list[int], run: Callable[[], None], pristine: _pristine.Pristine) -> None:
    for fd, target in zip(fds, (_PROTOCOL_FD, 1, 2), strict=True):
        os.dup2(fd, target)
    os.closerange(_PROTOCOL_FD + 1, 1 << 20)  # the server's control socket among them
    sc.set_dumpable(True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _pristine.apply(pristine)
    os.setsid()  # its own autogroup: one whose nice value the case may raise dies with it
    # A POSIX message queue cannot be listed without mounting mqueue, so none could be
    # removed after its case: a case may create none.
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
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
                    payload, extra = _receive(control)
                    for fd in extra:
                        os.close(fd)
                    if payload is None:
                        return None
                    if isinstance(decode_server_command(payload), CaseStop):
                        break
        finally:
            os.close(pidfd)
            _kill_all()
            _reap_all()
    return CaseEnded(timed_out=timed_out, clean=_clean(baseline, pristine))


def _clean(baseline: _restore.Baseline, pristine: _pristine.Pristine) -> bool:
    """Whether the next case may fork from this server (every process of the last one is
    gone): its own settings as prepared, its folders and IPC put back."""
    try:
        if _pristine.changed(pristine):
            return False
        return _restore.restore(baseline) and _restore.remove_sysv_ipc()
    except (OSError, ValueError):  # a setting it cannot read, a malformed IPC table
        return False


def serve_cases(request: CasesRequest, namespace: dict[str, Any], run_case: RunCase) -> None:
    """Be a case server for ``request.code`` until the engine closes the socket.

    Called by the runner in a locked-down one-shot worker, in place of its one run;
    ``namespace`` is the one each case runs in (``run_case`` has it too).
    """
    if os.getpid() != 1:
        raise RuntimeError("a case server must be init of its own pid namespace")
    sc.set_dumpable(False)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: no signal from a case lands
    run = functools.partial(run_case, *prepare(request.code, namespace))
    baseline = _restore.snapshot()
    pristine = _pristine.capture()
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
        ended = _one_case(command, fds, control, run, baseline, pristine)
        if ended is None:
            return
        write_frames_sync(_PROTOCOL_FD, encode_case_message(ended))
        if not ended.clean:
            return
