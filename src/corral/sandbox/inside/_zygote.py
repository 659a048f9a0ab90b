"""The zygote: a single-threaded fork server with the runtime already imported.

Started by the engine as ``python -m corral.sandbox.inside._zygote`` with a scrubbed environment.
As root it imports the preload set, compiles the seccomp policy, builds the template root in
a private mount namespace, then drops to an unprivileged uid for good. From then on it only
clones workers (each into new user, pid, mount, network, ipc and uts namespaces), hands the
engine a pidfd for each, and reaps them. It never runs user code itself.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
from typing import Any

from corral.sandbox._seqpacket import receive as _recv
from corral.sandbox._seqpacket import send as _send

# Imported here, as root: after dropping privileges the zygote may not be able to read its
# own source (a checkout under /root, say), and every child needs these.
from corral.sandbox.inside._holder import holder_main
from corral.sandbox.inside._runner import run_then_exit, worker_main

__all__ = ["main"]

_NAMESPACES = 0x10000000 | 0x20000000 | 0x00020000 | 0x40000000 | 0x08000000 | 0x04000000


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


def _spawn(
    message: dict[str, Any],
    fds: list[int],
    ctl: socket.socket,
    layout: tuple[str, list[tuple[str, str]]],
    bpf: bytes,
    uid: int,
    gid: int,
) -> None:
    from corral.sandbox import _syscalls as sc

    session = bool(message.get("session"))
    static = {
        key: int(message["static"][key])
        for key in ("work_bytes", "pids", "file_bytes", "open_files")
    }
    pid = sc.clone_namespaces(_NAMESPACES)
    if pid == 0:

        def child() -> None:
            sc.set_pdeathsig(signal.SIGKILL)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            null = os.open(f"{layout[0]}/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(fds[1], 1)
            os.dup2(fds[2], 2)
            os.dup2(fds[0], 3)
            os.closerange(4, 1 << 20)
            if session:
                holder_main(
                    template=layout[0],
                    staged=layout[1],
                    disk_bytes=int(message["disk_bytes"]),
                    seccomp_bpf=bpf,
                    outer_uid=uid,
                    outer_gid=gid,
                    static=static,
                )
            else:
                worker_main(
                    template=layout[0],
                    staged=layout[1],
                    seccomp_bpf=bpf,
                    outer_uid=uid,
                    outer_gid=gid,
                    static=static,
                )

        run_then_exit("session holder" if session else "worker", child)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        _send(ctl, {"t": "spawned", "id": message["id"], "pid": pid}, [pidfd])
    finally:
        os.close(pidfd)


def _reap() -> None:
    # Workers report their own resource use; the zygote only reaps (the engine kills by pidfd).
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _drop_privileges(uid: int, gid: int) -> None:
    from corral.sandbox import _syscalls as sc

    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # setuid made us non-dumpable, which would make /proc/self/uid_map unwritable for workers.
    sc.set_dumpable(True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="corral-zygote")
    parser.add_argument("--ctl-fd", type=int, required=True)
    parser.add_argument("--preload", default="numpy,pandas,matplotlib")
    parser.add_argument("--uid", type=int, default=65534)
    parser.add_argument("--gid", type=int, default=65534)
    parser.add_argument("--data-dir", default=None, help="host folder for session holders")
    args = parser.parse_args(argv)
    ctl = socket.socket(fileno=args.ctl_fd)

    from corral.sandbox import _syscalls as sc

    sc.set_pdeathsig(signal.SIGKILL)
    try:
        for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[key] = "1"
        os.environ["MPLBACKEND"] = "Agg"
        modules = [m for m in args.preload.split(",") if m]
        versions = _preload(modules)
        import corral.numeric  # noqa: F401 - importable inside the sandbox at no cost
        from corral.sandbox.inside import _runner
        from corral.sandbox.inside._cell import install_display
        from corral.sandbox.inside._rootfs import build_template, enter_base, runtime_paths
        from corral.sandbox.inside._seccomp import build_policy_bpf

        install_display(_runner.DISPLAY)
        bpf = build_policy_bpf()
        sc.unshare(0x00020000)
        template, staged = build_template(runtime_paths(), data_dir=args.data_dir)
        layout = (enter_base(template), staged)
        _drop_privileges(args.uid, args.gid)
    except BaseException as exc:  # noqa: BLE001 - the engine turns this into IsolationError
        _send(ctl, {"t": "failed", "error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)

    _runner.warm_up_zygote()
    gc.collect()
    gc.freeze()  # keep the collector from dirtying every inherited page in each worker
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    python = sys.version.split()[0]
    _send(ctl, {"t": "hello", "pid": os.getpid(), "python": python, "versions": versions})

    selector = selectors.DefaultSelector()
    selector.register(ctl, selectors.EVENT_READ)
    selector.register(read_end, selectors.EVENT_READ)
    while True:
        for ready, _events in selector.select():
            if ready.fileobj is ctl:
                try:
                    message, fds = _recv(ctl)
                except ConnectionResetError:
                    return  # the engine went away: so do we, and our workers with us
                if message is None:
                    return
                if message.get("t") == "spawn":
                    _spawn(message, fds, ctl, layout, bpf, args.uid, args.gid)
                else:
                    for fd in fds:
                        os.close(fd)
            else:
                try:
                    while os.read(read_end, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap()


if __name__ == "__main__":
    main()
