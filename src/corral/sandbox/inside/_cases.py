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
* compiles the code once (a SyntaxError is left for each case to raise, so that each reports
  it exactly as a fresh worker would) and imports what the code imports at its top level,
  when that is a standard-library or preloaded module, except the few with side effects one
  would see (``this``, ``antigravity``...) and any that warns as it is imported (it is
  dropped again, so each case sees the warning as it would have);
* runs the code's leading import statements, when each only binds names to what loaded
  modules already hold (``import re``, ``from math import *``) and does so without a
  warning, an error or an import, in the namespace its cases inherit, and compiles the cases'
  code with those statements as ``pass`` (a later ``from __future__`` or string is then still
  what it is in a fresh run). A name those imports bound to what each run sets afresh
  (``sys.stdin``, ``sys.argv``, ``input``: ``SET_BY_EACH_RUN``) is bound again in each
  case, to the case's own, just before its code runs. A case then starts
  with those names bound, as a fresh run has them after its first lines, and does not pay
  for binding them: a star import touches (and so copies) every page that holds one of the
  module's objects;
* records the state of its writable folders (``/work``, ``/tmp``, ``/dev/shm``).

Per case (``CaseStart``, with the case's protocol socket and its stdout and stderr pipes) it
forks a plain child: no namespace flags, which the policy allows. The child takes the three
descriptors as fds 3, 1 and 2 and nothing else of the server's, becomes dumpable again (its
own /proc/self, as subprocess needs), reseeds its random generators and serves the case's
``RunRequest`` as a fresh worker does: same limits (lowered for the child alone), same stdin
and files, same cell semantics, same fitting, same report. Fresh Python state comes by fork:
the server never runs user code. The child's exit ends the case's processes, as a fresh
worker's exit does: the server kills every other process of the namespace. The case ends on
``CaseStop`` from the engine, or when the server's own timer, a little past the case's
deadline, runs out. Then the server kills every process but itself, reaps them, wipes what
the case left in the writable folders (a mount point, the runtime's read-only binds, is never
entered), removes System V IPC objects, and answers ``CaseEnded``. Folders it cannot restore
exactly make it answer ``clean=False`` and exit: the engine then takes a new server.

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
import ast
import contextlib
import ctypes
import functools
import importlib
import os
import resource
import selectors
import shutil
import signal
import socket
import stat
import sys
import time
import types
import warnings
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
from corral.sandbox.inside._cell import CELL_FILENAME, Cell, compile_cell

__all__ = ["SET_BY_EACH_RUN", "rebind_run_values", "serve_cases"]

RunCase = Callable[[Cell | None, Callable[[], None] | None], None]
"""The runner's one-shot run of a case in the child (reads its request from fd 3), given the
compiled code and what to call just before the code runs."""

_STDLIB = frozenset(sys.stdlib_module_names)
_NOT_PREIMPORTED = frozenset(
    {"this", "antigravity", "__hello__", "__phello__", "idlelib", "turtledemo", "turtle"}
    | {"tkinter", "readline", "__main__", "pdb", "site", "ensurepip", "venv", "webbrowser"}
)
"""Modules whose import prints, opens something or reads the terminal: each case imports
them itself."""
_ROOTS = ("/work", "/tmp", "/dev/shm")  # noqa: S108 - the worker's own tmpfs mounts
"""The writable folders of a one-shot worker (``/mnt/data`` is ``/work`` bound again)."""
_PROTOCOL_FD = 3
_FD_BYTES = 4
_OWN_TIMER_MARGIN = 1.0  # seconds past the case's deadline before the server kills on its own
_IPC_RMID = 0
_SYSV = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))

_UNSET = object()

Baseline = dict[str, int]
"""Every entry under the writable folders: its mode, or -1 for a mount point."""


def _parsed(code: str) -> ast.Module | None:
    """``code``'s syntax tree, or None when it does not parse (each case then reports that)."""
    try:
        return ast.parse(code, CELL_FILENAME)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _preimport(tree: ast.Module) -> None:
    names: list[str] = []
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Try | ast.If):
            body.extend(node.body)
    for name in dict.fromkeys(names):
        root = name.partition(".")[0]
        if name in sys.modules or root in _NOT_PREIMPORTED:
            continue
        if root not in _STDLIB and root not in sys.modules:
            continue  # a library the zygote did not preload: its import may do anything
        before = set(sys.modules)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.suppress(Exception):  # each case then fails on it as it would
                importlib.import_module(name)
        if caught:
            for added in set(sys.modules) - before:
                del sys.modules[added]


_SET_PER_RUN = frozenset(
    {"__builtins__", "__name__", "__doc__", "__file__", "__spec__", "__loader__", "__package__"}
    | {"input_files", "input_assets", "_"}
)
"""Names of the namespace the run itself sets: leading imports that bind one are left to
each case, which binds it after the run has set it, as a fresh run does."""


SET_BY_EACH_RUN: dict[str, frozenset[str]] = {
    "sys": frozenset({"stdin", "argv"}),
    "builtins": frozenset({"input"}),
}
"""What a run sets afresh in a module before its code starts (``_feed``'s stdin, ``input``,
``prepare_script``'s ``argv``). A name the server's run of the leading imports bound to one
of these (``from sys import stdin``) is bound again in each case, to the case's own."""

Rebinding = tuple[types.ModuleType, str, str, object]
"""A module, its attribute, the name the leading imports bound it to, and its value then."""


def _bound_by(node: ast.stmt) -> frozenset[str] | None:
    """The names the statement binds, when it only binds them to what loaded modules hold
    already (so it imports nothing and runs no module code: a name ``from`` would import is a
    submodule); None for any other statement."""
    if isinstance(node, ast.Import):
        if not all(
            alias.name in sys.modules and alias.name.partition(".")[0] not in _NOT_PREIMPORTED
            for alias in node.names
        ):
            return None
        return frozenset(alias.asname or alias.name.partition(".")[0] for alias in node.names)
    if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
        return None
    module = sys.modules.get(node.module)
    if module is None or node.module.partition(".")[0] in _NOT_PREIMPORTED:
        return None
    held = vars(module)
    if [alias.name for alias in node.names] == ["*"]:
        exported = held.get("__all__")
        if exported is None:
            return frozenset(name for name in held if not name.startswith("_"))
        if isinstance(exported, list | tuple) and all(
            isinstance(name, str) and name in held for name in exported
        ):
            return frozenset(exported)
        return None
    if all(alias.name in held for alias in node.names):
        return frozenset(alias.asname or alias.name for alias in node.names)
    return None


def _leading_imports(tree: ast.Module) -> list[int]:
    """The leading statements that only bind names to what loaded modules hold already
    (``_bound_by``), up to the first other one or a ``__future__`` import."""
    run: list[int] = []
    for index, node in enumerate(tree.body):
        if _bound_by(node) is None or _is_future(node):
            break
        run.append(index)
    return run


def _set_by_each_run(statements: list[ast.stmt]) -> list[tuple[str, str, str]]:
    """(module, attribute, bound name) for what ``statements`` bind from ``SET_BY_EACH_RUN``."""
    found: list[tuple[str, str, str]] = []
    for node in statements:
        if not isinstance(node, ast.ImportFrom) or node.module not in SET_BY_EACH_RUN:
            continue
        for alias in node.names:
            attributes = SET_BY_EACH_RUN[node.module]
            if alias.name == "*":
                found.extend((node.module, name, name) for name in sorted(attributes))
            elif alias.name in attributes:
                found.append((node.module, alias.name, alias.asname or alias.name))
    return found


def rebind_run_values(rebindings: tuple[Rebinding, ...], namespace: dict[str, Any]) -> None:
    """In a case, just before its code runs: what the leading imports bound from
    ``SET_BY_EACH_RUN`` becomes what the case's run has set there, as a fresh run binds it.
    A name a later import bound to something else keeps that."""
    for module, attribute, name, value in rebindings:
        now = vars(module).get(attribute, _UNSET)
        if now is not value and namespace.get(name, _UNSET) is value:
            if now is _UNSET:
                del namespace[name]
            else:
                namespace[name] = now


def _is_future(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


Leading = tuple[frozenset[int], tuple[Rebinding, ...]]
"""The indices of the statements a server ran for its cases, and what each case rebinds."""
_NONE_RUN: Leading = (frozenset(), ())


def _run_leading_imports(tree: ast.Module, namespace: dict[str, Any]) -> Leading:
    """Run the code's leading imports of what loaded modules hold, in ``namespace``: the
    statements run (none when running them would differ from a fresh run) and what each case
    must bind again (``rebind_run_values``)."""
    run = _leading_imports(tree)
    if not run:
        return _NONE_RUN
    before = dict(namespace)
    loaded = set(sys.modules)
    statements = [tree.body[index] for index in run]
    leading = compile(ast.Module(body=statements, type_ignores=[]), CELL_FILENAME, "exec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(leading, namespace)  # noqa: S102 - imports of loaded modules, checked above
            failed = False
        except Exception:  # noqa: BLE001 - each case then fails on it as it would
            failed = True
    changed = {name for name, value in namespace.items() if before.get(name, _UNSET) is not value}
    imported = set(sys.modules) - loaded
    if failed or caught or imported or changed & _SET_PER_RUN:
        namespace.clear()
        namespace.update(before)
        for name in imported:
            del sys.modules[name]
        return _NONE_RUN
    rebindings = tuple(
        (sys.modules[module], attribute, name, vars(sys.modules[module]).get(attribute, _UNSET))
        for module, attribute, name in _set_by_each_run(statements)
    )
    return frozenset(run), rebindings


def _snapshot(roots: tuple[str, ...] = _ROOTS) -> Baseline:
    entries: Baseline = {}
    for root in roots:
        device = os.lstat(root).st_dev
        folders = [root]
        while folders:
            with os.scandir(folders.pop()) as listing:
                for entry in listing:
                    info = entry.stat(follow_symlinks=False)
                    if info.st_dev != device:
                        entries[entry.path] = -1
                        continue
                    entries[entry.path] = info.st_mode
                    if stat.S_ISDIR(info.st_mode):
                        folders.append(entry.path)
    return entries


def _wipe(folder: str, device: int, baseline: Baseline) -> int:
    """Remove from ``folder`` whatever is not in ``baseline``; the number of baseline entries
    found there as they were (directories get their mode back)."""
    found = 0
    with os.scandir(folder) as listing:
        entries = list(listing)
    for entry in entries:
        info = entry.stat(follow_symlinks=False)
        kept = baseline.get(entry.path)
        if info.st_dev != device:  # a mount point (the runtime's read-only binds): never entered
            found += kept == -1
        elif stat.S_ISDIR(info.st_mode) and kept is not None and stat.S_ISDIR(kept):
            if info.st_mode != kept:
                os.chmod(entry.path, stat.S_IMODE(kept), follow_symlinks=False)
            found += 1 + _wipe(entry.path, device, baseline)
        elif stat.S_ISDIR(info.st_mode):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    return found


_LIBC = ctypes.CDLL(None, use_errno=True)


def _remove_sysv_ipc() -> None:
    for kind, call in _SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as table:
                rows = table.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        remove = getattr(_LIBC, call)
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                result = remove(ident, 0, _IPC_RMID)
            else:
                result = remove(ident, _IPC_RMID, None)
            if result < 0:
                raise OSError(ctypes.get_errno(), f"{call} IPC_RMID")


def _restore(baseline: Baseline, roots: tuple[str, ...] = _ROOTS) -> bool:
    """Put the writable folders back as they were; False if they could not be."""
    try:
        found = sum(_wipe(root, os.lstat(root).st_dev, baseline) for root in roots)
        if roots is _ROOTS:
            _remove_sysv_ipc()
    except (OSError, RecursionError, ValueError):
        return False
    return found == len(baseline)


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


def _child(
    fds: list[int], run_case: RunCase, cell: Cell | None, prelude: Callable[[], None] | None
) -> None:
    for fd, target in zip(fds, (_PROTOCOL_FD, 1, 2), strict=True):
        os.dup2(fd, target)
    os.closerange(_PROTOCOL_FD + 1, 1 << 20)  # the server's control socket among them
    sc.set_dumpable(True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A POSIX message queue cannot be listed without mounting mqueue, so none could be
    # removed after its case: a case may create none.
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    run_case(cell, prelude)


def _one_case(
    start: CaseStart,
    fds: list[int],
    control: socket.socket,
    run_case: RunCase,
    cell: Cell | None,
    prelude: Callable[[], None] | None,
    baseline: Baseline,
) -> CaseEnded | None:
    """Run one case to its end; None when the engine has gone away."""
    from corral.sandbox.inside._runner import run_then_exit

    pid = os.fork()
    if pid == 0:
        run_then_exit("case", lambda: _child(fds, run_case, cell, prelude))
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
    return CaseEnded(timed_out=timed_out, clean=_restore(baseline))


def serve_cases(request: CasesRequest, namespace: dict[str, Any], run_case: RunCase) -> None:
    """Be a case server for ``request.code`` until the engine closes the socket.

    Called by the runner in a locked-down one-shot worker, in place of its one run;
    ``namespace`` is the one each case runs in (``run_case`` has it too).
    """
    if os.getpid() != 1:
        raise RuntimeError("a case server must be init of its own pid namespace")
    sc.set_dumpable(False)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: no signal from a case lands
    # Where a fresh run has them (before the code's own names: globals() keeps that order).
    namespace.setdefault("input_files", {})
    namespace.setdefault("input_assets", {})
    cell: Cell | None = None
    prelude: Callable[[], None] | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tree = _parsed(request.code)
    if tree is not None and not caught:  # a parser's warning: each case must show it too
        _preimport(tree)
        skip, rebindings = _run_leading_imports(tree, namespace)
        if rebindings:
            prelude = functools.partial(rebind_run_values, rebindings, namespace)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.suppress(SyntaxError, ValueError, RecursionError, MemoryError):
                cell = compile_cell(tree, request.code, skip=skip)
        if caught:
            # A SyntaxWarning, say: each case compiles the code itself and shows it, as a
            # fresh run does. So does code that does not compile, and reports the error.
            cell = None
    baseline = _snapshot()
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
        ended = _one_case(command, fds, control, run_case, cell, prelude, baseline)
        if ended is None:
            return
        write_frames_sync(_PROTOCOL_FD, encode_case_message(ended))
        if not ended.clean:
            return
