"""The zygote: a single-threaded fork server with the runtime already imported.

Started by the engine as a plain ``python3`` whose stdin is its control socket; the first
message on it is its configuration, so its command line (which every worker inherits as
``/proc/1/cmdline``) says nothing of corral. As root it hides that command line, imports the
preload set with its caches in corral's private runtime directory, compiles the seccomp
policy and builds the template root in a private mount namespace. Then it drops to its own
uid for good, keeping only CAP_SETUID, CAP_SETGID (to give each worker its own host uid) and
CAP_KILL, and staying non-dumpable. From then on it only clones workers (each into new user, pid,
mount, network, ipc and uts namespaces), maps each to a host uid of its own, hands the engine
a pidfd for each, and reaps them. It never runs user code itself.
"""

from __future__ import annotations

import collections
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
from dataclasses import dataclass
from typing import NoReturn

from corral.sandbox import _syscalls as sc
from corral.sandbox._control_protocol import (
    Hello,
    OutOfMemory,
    Spawn,
    Spawned,
    SpawnRefused,
    StartFailed,
    Sync,
    Synced,
    UseCgroups,
    ZygoteConfig,
    decode,
)
from corral.sandbox._descriptors import Descriptors
from corral.sandbox._seqpacket import receive as _recv
from corral.sandbox._seqpacket import send as _send

# Imported here, as root: after dropping privileges the zygote may not be able to read its
# own source (a checkout under /root, say), and every child needs these.
from corral.sandbox.inside._cgroups import CgroupFolders, PendingCgroups
from corral.sandbox.inside._child import run_then_exit
from corral.sandbox.inside._holder import holder_main
from corral.sandbox.inside._isolate import SANDBOX_ENV, settle_environment, use_template
from corral.sandbox.inside._rootfs import SANDBOX_GID, SANDBOX_UID
from corral.sandbox.inside._runner import worker_main

__all__ = ["main"]

_NAMESPACES = 0x10000000 | 0x20000000 | 0x00020000 | 0x40000000 | 0x08000000 | 0x04000000
# CAP_SETGID and CAP_SETUID map each worker to a host uid of its own. CAP_KILL lets the
# kernel deliver the workers' parent-death signal when we die: that signal is checked like
# one we sent, and a worker's uid is not ours.
_KEPT_CAPABILITIES = (5, 6, 7)
_PRIVATE_HOME = ("HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
_HANDSHAKE_TIMEOUT = 5.0  # seconds for a new child to say it is ready to be mapped
_SPAWN_FDS = 3  # the worker's protocol socket, stdout and stderr
_READY = b"r"  # a new child's handshake: map my ids
_REFUSED = b"!"  # ... or: I cannot run, and why
_REFUSAL_BYTES = 512


def _preload(modules: list[str]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for name in modules:
        module = importlib.import_module(name)
        if name == "matplotlib":
            module.use("Agg")
            pyplot = importlib.import_module("matplotlib.pyplot")
            importlib.import_module("matplotlib.backends.backend_agg")
            pyplot.close(pyplot.figure())  # loads the font cache once, for every worker
        versions[name] = str(getattr(module, "__version__", "?"))
    return versions


class _Uids:
    """The host uids this zygote gives its workers: one per live worker, reused oldest first.

    A uid comes back when the zygote reaps the worker: the worker is init of its own pid
    namespace, and the kernel reports its exit only once every process in it is gone.
    """

    def __init__(self, first: int, count: int) -> None:
        self._free = collections.deque(range(first, first + count))
        self._by_pid: dict[int, int] = {}

    def take(self) -> int | None:
        return self._free.popleft() if self._free else None

    def hold(self, pid: int, uid: int) -> None:
        self._by_pid[pid] = uid

    def give_back(self, uid: int) -> None:
        self._free.append(uid)

    def reaped(self, pid: int) -> int | None:
        """The uid ``pid`` had, now free again (None: it was none of our workers)."""
        uid = self._by_pid.pop(pid, None)
        if uid is not None:
            self._free.append(uid)
        return uid


def _map_ids(pid: int, uid: int) -> None:
    """Map the worker's sandbox uid and gid onto ``uid`` (CAP_SETUID/SETGID needed here)."""
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{SANDBOX_UID} {uid} 1\n"),
        ("gid_map", f"{SANDBOX_GID} {uid} 1\n"),
    ):
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _become_sandbox_user(handshake: socket.socket) -> None:
    """In the child: let the zygote map our ids, then become the sandbox user.

    We start non-dumpable like the zygote, so our /proc files belong to root and the zygote
    (not root) could not open our uid_map: we become dumpable (our files then belong to the
    uid the zygote holds while it maps us), say so, and wait.
    """
    sc.set_dumpable(True)
    handshake.send(_READY)
    handshake.recv(1)  # EOF once the maps are written (or the zygote gave up and kills us)
    handshake.close()
    os.setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID)
    # The ids we had were not 0 in this namespace, so the capabilities we hold in it stay.
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    # A credential change clears the parent-death signal and makes a process non-dumpable.
    # A worker stays dumpable so it can read its own /proc/self/fd (subprocess does); only
    # its own uid can trace it.
    sc.set_pdeathsig(signal.SIGKILL)
    sc.set_dumpable(True)


@dataclass(slots=True)
class _State:
    """What every spawn uses: the control socket, the template root, the policy, the uids."""

    ctl: socket.socket
    layout: tuple[str, list[tuple[str, str]]]
    """The template root and the runtime folders staged in it."""
    bpf: bytes
    uids: _Uids
    cgroups: CgroupFolders | None = None


def _spawn(request: Spawn, fds: list[int], state: _State) -> None:
    ctl, uids, cgroups = state.ctl, state.uids, state.cgroups
    with Descriptors(fds) as held:
        uid = uids.take() if len(fds) == _SPAWN_FDS else None
        if uid is None:
            why = "every sandbox uid is in use" if fds else "a spawn takes three descriptors"
            _send(ctl, SpawnRefused(id=request.id, error=why))
            return
        try:
            pending = (
                None
                if cgroups is None
                else cgroups.prepare(uid, request.cgroup, request.cgroup_group)
            )
        except OSError as exc:
            uids.give_back(uid)
            _send(ctl, SpawnRefused(id=request.id, error=f"cgroup: {exc}"))
            return
        _clone(request, fds, held, state, uid, pending)


def _clone(
    request: Spawn,
    fds: list[int],
    held: Descriptors,
    state: _State,
    uid: int,
    pending: PendingCgroups | None,
) -> None:
    ctl, uids = state.ctl, state.uids
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError as exc:  # out of descriptors or memory: this spawn fails, the zygote stays
        _abandon(uid, pending, state)
        _send(ctl, SpawnRefused(id=request.id, error=f"worker set-up: {exc}"))
        return
    # The worker's user namespace is owned by the effective uid that creates it, and the
    # kernel charges every process in it to that owner's RLIMIT_NPROC count in our namespace:
    # with the worker's own uid as owner, no tenant's processes count against another's
    # (or against ours). Until the maps are written we stay that uid, which owns the child's
    # /proc files; changing between two non-zero uids keeps our capabilities.
    zygote_uid = os.geteuid()
    os.setresuid(-1, uid, -1)
    try:
        pid = sc.clone_namespaces(_NAMESPACES)
    except OSError:  # a zygote that cannot clone is broken: the engine starts another
        os.setresuid(-1, zygote_uid, -1)
        _abandon(uid, pending, state)
        ours.close()
        theirs.close()
        raise
    if pid == 0:
        _worker_child(request, fds, (ours, theirs), state, pending)
    uids.hold(pid, uid)
    theirs.close()
    held.close()
    try:
        if pending is not None:
            # Before the child changes any credential: see inside/_cgroups.
            pending.attach(pid)
        ours.settimeout(_HANDSHAKE_TIMEOUT)
        answer = ours.recv(_REFUSAL_BYTES)
        if answer[:1] == _REFUSED:
            raise OSError(answer[1:].decode(errors="replace"))
        if answer != _READY:
            raise OSError("the new worker died before its ids were mapped")
        _map_ids(pid, uid)
    except OSError as exc:
        os.kill(pid, signal.SIGKILL)  # reaped like any worker; its uid comes back then
        _send(ctl, SpawnRefused(id=request.id, error=f"worker set-up: {exc}"))
        return
    finally:
        os.setresuid(-1, zygote_uid, -1)
        ours.close()
        if pending is not None:
            pending.close()
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        os.kill(pid, signal.SIGKILL)  # reaped like any worker; its uid comes back then
        _send(ctl, SpawnRefused(id=request.id, error=f"worker set-up: {exc}"))
        return
    try:
        _send(ctl, Spawned(id=request.id, pid=pid, uid=uid), [pidfd])
    finally:
        os.close(pidfd)


def _abandon(uid: int, pending: PendingCgroups | None, state: _State) -> None:
    """A spawn that cloned nothing: its uid and its cgroup go back."""
    state.uids.give_back(uid)
    if pending is not None:
        pending.close()
    if state.cgroups is not None:
        state.cgroups.remove(uid)


def _worker_child(
    request: Spawn,
    fds: list[int],
    sockets: tuple[socket.socket, socket.socket],
    state: _State,
    pending: PendingCgroups | None,
) -> NoReturn:
    ours, theirs = sockets
    layout, bpf = state.layout, state.bpf
    session = request.session_disk_bytes is not None

    def child() -> None:
        sc.set_pdeathsig(signal.SIGKILL)
        if pending is not None:
            try:
                pending.enter()  # while our real uid is still the zygote's
            except OSError as exc:
                theirs.send(_REFUSED + f"cgroup: {exc}".encode()[: _REFUSAL_BYTES - 1])
                raise
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ours.close()
        _become_sandbox_user(theirs)
        null = os.open(f"{layout[0]}/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[1], 1)
        os.dup2(fds[2], 2)
        os.dup2(fds[0], 3)
        os.closerange(4, 1 << 20)
        if request.session_disk_bytes is not None:
            holder_main(
                template=layout[0],
                staged=layout[1],
                disk_bytes=request.session_disk_bytes,
                seccomp_bpf=bpf,
                static=request.static,
            )
        else:
            worker_main(
                template=layout[0], staged=layout[1], seccomp_bpf=bpf, static=request.static
            )

    run_then_exit("session holder" if session else "worker", child)


def _reap(state: _State) -> None:
    # Workers report their own resource use; the zygote only reaps (the engine kills by pidfd).
    cgroups = state.cgroups
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        uid = state.uids.reaped(pid)
        if uid is not None and cgroups is not None:
            # The worker was init of its namespace: its cgroup is empty, and is kept or goes.
            kills, count = cgroups.release(uid)
            if kills:  # the engine may not have read the cgroup before it went
                _send(state.ctl, OutOfMemory(pid=pid, kills=count))


def _usable(message: UseCgroups, fds: list[int], state: _State) -> bool:
    """A first ``UseCgroups`` with one folder per hierarchy (a later one is refused)."""
    return state.cgroups is None and len(fds) == len(message.hierarchies)


def _drop_privileges(uid: int) -> None:
    sc.keep_only_capabilities(_KEPT_CAPABILITIES, uid, uid)
    sc.set_no_new_privs()
    sc.set_dumpable(False)  # setuid did this already; said again, since it is the point


def _configure(ctl: socket.socket) -> ZygoteConfig:
    packet, fds = _recv(ctl)
    Descriptors(fds).close()
    config = None if packet is None else decode(packet, ZygoteConfig)
    if config is None:
        sys.exit(1)
    return config


def main() -> None:
    sc.set_pdeathsig(signal.SIGKILL)
    # The control socket arrives as stdin; stdin itself becomes /dev/null.
    ctl = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    ctl.setblocking(True)
    try:
        config = _configure(ctl)
        sc.hide_command_line(b"python3")
        sys.argv[:] = ["python3"]
        sys.orig_argv[:] = ["python3"]
        for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[key] = "1"
        os.environ["MPLBACKEND"] = "Agg"
        # Whatever a preloaded library writes as root (matplotlib's font cache and config,
        # anything under ~ or the XDG folders) lands in our private folder, never in a
        # shared path such as /tmp/matplotlib or the sandbox's HOME on the host.
        private = dict.fromkeys(_PRIVATE_HOME, config.cache_dir)
        os.environ.update(private)
        modules = [m for m in config.preload if m]
        versions = _preload(modules)
        for name in private:  # workers must not learn where the cache lives
            os.environ.pop(name, None)
        os.environ.update(SANDBOX_ENV)
        use_template(config.files)
        from corral.sandbox.inside import _runner
        from corral.sandbox.inside._cell import install_display
        from corral.sandbox.inside._rootfs import build_template, enter_base, runtime_paths
        from corral.sandbox.inside._seccomp_cache import load_policy_bpf

        # A zygote that serves one run (the CLI's) loads no more than that run needs: IPython
        # on first use, no warm-up, whose pages only pay off when many workers share them.
        prewarm = config.prewarm
        install_display(_runner.DISPLAY, load_now=prewarm)
        if prewarm:
            import corral.numeric  # noqa: F401 - importable inside the sandbox at no cost
        bpf = load_policy_bpf(config.cache_dir)
        sc.unshare(0x00020000)
        template, staged = build_template(
            runtime_paths(), data_dir=config.data_dir or None, files=config.files
        )
        layout = (enter_base(template), staged)
        first, count = config.uids
        _drop_privileges(first)
        uids = _Uids(first + 1, count - 1)  # the first is the zygote's own
    except BaseException as exc:  # noqa: BLE001 - the engine turns this into IsolationError
        _send(ctl, StartFailed(error=f"{type(exc).__name__}: {exc}"))
        os._exit(1)

    if prewarm:
        _runner.warm_up_zygote()
        gc.collect()
    settle_environment()  # it does not change from here on: the zygote runs no more imports
    gc.freeze()  # keep the collector from dirtying every inherited page in each worker
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    python = sys.version.split()[0]
    _send(ctl, Hello(pid=os.getpid(), python=python, versions=versions))
    state = _State(ctl, layout, bpf, uids)

    selector = selectors.DefaultSelector()
    selector.register(ctl, selectors.EVENT_READ)
    selector.register(read_end, selectors.EVENT_READ)
    while True:
        for ready, _events in selector.select():
            if ready.fileobj is ctl:
                try:
                    packet, fds = _recv(ctl)
                except ConnectionResetError:
                    packet, fds = None, []
                if packet is None:
                    # The engine went away: so do we, at once (our workers die with us), without
                    # tearing down a heap of preloaded modules nobody will use again.
                    os._exit(0)
                message = decode(packet, Spawn, UseCgroups, Sync)
                if isinstance(message, Spawn):
                    try:
                        _spawn(message, fds, state)
                    except (BrokenPipeError, ConnectionResetError):
                        os._exit(0)  # the engine closed us mid-spawn: nobody wants the worker
                elif isinstance(message, Sync):
                    _reap(state)  # a worker's exit not yet seen is reported first
                    _send(ctl, Synced(n=message.n))
                elif isinstance(message, UseCgroups) and _usable(message, fds, state):
                    state.cgroups = CgroupFolders(
                        message.hierarchies, fds, message.group_knobs, message.oom_events
                    )
                else:
                    Descriptors(fds).close()
            else:
                try:
                    while os.read(read_end, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(state)


if __name__ == "__main__":
    main()
