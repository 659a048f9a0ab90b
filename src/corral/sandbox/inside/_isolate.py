"""Inside a fresh worker: enter the template root, lock the process down, bound each run.

``enter`` runs right after the namespace clone: id maps, the worker's own file systems, pivot,
hostname and environment. ``lock_down`` runs before the worker reports ready, so a pooled
worker is already fully isolated while it waits: every capability dropped, no_new_privs,
seccomp, static rlimits. ``bound_run`` only lowers limits once a request names them.

Inputs arrive without privileges: ``/inputs`` is a read-only bind of a tmpfs whose writable
mount is detached; the worker hands the engine a descriptor of that tmpfs before any user code
exists, and the engine writes the files through it.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Mapping

from corral.sandbox import _syscalls as sc
from corral.sandbox.inside._rootfs import DATA_STAGE, DATA_TARGET, MASKS, PROC_MASKS

__all__ = ["SANDBOX_ENV", "bound_run", "enter", "lock_down"]

SANDBOX_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "USER": "sandbox",
    "MPLBACKEND": "Agg",
    "PLOTLY_RENDERER": "plotly_mimetype",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
_NOSUID_NODEV = sc.MS_NOSUID | sc.MS_NODEV
_INPUTS_STAGING = "/tmp/.corral-inputs"


def enter(
    *,
    template: str,
    staged: list[tuple[str, str]],
    work_bytes: int,
    session_disk_bytes: int | None = None,
) -> tuple[str, int]:
    """Build the worker's mounts on the template and pivot into it.

    The zygote has mapped the worker's ids already (onto a host uid of the worker's own).

    Returns the working directory user code starts in and a descriptor of the writable
    inputs file system (for the engine; the worker closes its copy once it has passed it on).
    """
    root = template
    # Mounts copied from the zygote's namespace are locked; pivot_root needs a root of our own.
    sc.mount(root, root, None, sc.MS_BIND | sc.MS_REC)
    sc.mount("work", f"{root}/work", "tmpfs", _NOSUID_NODEV, f"mode=0755,size={work_bytes}")
    sc.mount("tmp", f"{root}/tmp", "tmpfs", _NOSUID_NODEV, f"mode=1777,size={work_bytes}")
    sc.mount("shm", f"{root}/dev/shm", "tmpfs", _NOSUID_NODEV | sc.MS_NOEXEC, "mode=1777,size=64m")
    staging = f"{root}{_INPUTS_STAGING}"
    os.mkdir(staging, 0o700)
    sc.mount("inputs", staging, "tmpfs", _NOSUID_NODEV | sc.MS_NOEXEC, "mode=0755,size=256m")
    sc.mount(staging, f"{root}/inputs", None, sc.MS_BIND)
    sc.mount(
        None,
        f"{root}/inputs",
        None,
        sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | _NOSUID_NODEV | sc.MS_NOEXEC,
    )
    cwd = "/work"
    if session_disk_bytes is None:
        # DIAL code writes to /mnt/data; in a one-shot run that is the same fresh /work.
        sc.mount(f"{root}/work", f"{root}/mnt/data", None, sc.MS_BIND)
    elif os.path.isdir(f"{root}{DATA_STAGE}"):
        # Container mode: the session's files are a host folder, kept across restarts.
        cwd = _bind_data_folder(root)
    else:
        # The session's files outlive interpreter restarts: they live as long as the holder.
        sc.mount(
            "data",
            f"{root}/mnt/data",
            "tmpfs",
            _NOSUID_NODEV,
            f"mode=0755,size={session_disk_bytes}",
        )
        # E2B's clients know the same folder as the home of user ``user``.
        sc.mount(f"{root}/mnt/data", f"{root}/home/user", None, sc.MS_BIND)
        cwd = "/mnt/data"
    if os.path.isdir(f"{root}{DATA_STAGE}"):
        # Nothing but a session holder sees the host folder; the others get an empty cover.
        sc.mount("none", f"{root}{DATA_STAGE}", "tmpfs", sc.MS_RDONLY | _NOSUID_NODEV, "size=4k")
    for stage, path in staged:
        # Runtime directories under /work or /tmp reappear inside the fresh file systems.
        os.makedirs(f"{root}{path}", exist_ok=True)
        sc.mount(f"{root}{stage}", f"{root}{path}", None, sc.MS_BIND | sc.MS_REC)
    sc.mount("proc", f"{root}/proc", "proc", _NOSUID_NODEV | sc.MS_NOEXEC)
    for mask, target in PROC_MASKS:
        sc.mount(f"{root}{MASKS}/{mask}", f"{root}/proc/{target}", None, sc.MS_BIND)
    os.chdir(root)
    sc.pivot_root(".", ".")
    sc.umount(".", sc.MNT_DETACH)
    os.chdir("/")
    inputs_fd = os.open(_INPUTS_STAGING, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    sc.umount(_INPUTS_STAGING, sc.MNT_DETACH)
    os.rmdir(_INPUTS_STAGING)
    sc.sethostname("corral")
    if os.environ != SANDBOX_ENV:
        # The zygote's own environment is the sandbox's already; rebuilding it costs every
        # worker a rewrite of libc's environment block for nothing.
        os.environ.clear()
        os.environ.update(SANDBOX_ENV)
    with contextlib.suppress(FileExistsError):  # a staged runtime path may have made it
        os.mkdir(SANDBOX_ENV["MPLCONFIGDIR"])
    return cwd, inputs_fd


def _bind_data_folder(root: str) -> str:
    """Bind the template's data folder at ``/mnt/data`` and at its host path; the cwd."""
    sc.mount(f"{root}{DATA_STAGE}", f"{root}/mnt/data", None, sc.MS_BIND)
    with open(f"{root}{DATA_TARGET}") as named:
        target = named.read().strip()
    if not target:
        return "/mnt/data"
    sc.mount(f"{root}{DATA_STAGE}", f"{root}{target}", None, sc.MS_BIND)
    return target


def lock_down(*, seccomp_bpf: bytes, pids: int, file_bytes: int, open_files: int) -> None:
    """Drop every privilege and apply the static rlimits; irreversible."""
    for limit, value in (
        (resource.RLIMIT_NPROC, pids),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    sc.drop_capabilities()
    sc.set_no_new_privs()
    sc.load_seccomp_bpf(seccomp_bpf)


def bound_run(
    *,
    memory_bytes: int,
    cpu_seconds: int,
    pids: int,
    file_bytes: int,
    open_files: int,
    session: bool,
) -> None:
    """Lower the limits for one run (an unprivileged process may only lower them).

    A session's CPU limit stays soft: its interpreter accumulates CPU time across runs, and
    the engine's deadline, not this backstop, is what stops a run.
    """
    vm_size = _current_vm_bytes()
    cpu_used = int(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))
    for limit, value, hard_too in (
        (resource.RLIMIT_AS, vm_size + memory_bytes, True),
        (resource.RLIMIT_CPU, cpu_used + cpu_seconds, not session),
        (resource.RLIMIT_NPROC, pids, True),
        (resource.RLIMIT_FSIZE, file_bytes, True),
        (resource.RLIMIT_NOFILE, open_files, True),
    ):
        _soft, hard = resource.getrlimit(limit)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(limit, (value, value if hard_too else hard))


def _current_vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
