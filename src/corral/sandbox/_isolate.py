"""Inside a fresh worker: enter the template root, then seal the process before user code.

Two stages, because a pre-isolated worker waits in the pool before it knows its inputs:
``enter`` runs right after the namespace clone (maps, mounts, pivot, hostname, environment,
file descriptors); ``seal`` runs once a request has arrived (inputs written and made
read-only, rlimits, every capability dropped, no_new_privs, seccomp).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping

from corral.sandbox import _syscalls as sc
from corral.sandbox._rootfs import SANDBOX_GID, SANDBOX_UID

__all__ = ["SANDBOX_ENV", "enter", "seal"]

SANDBOX_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "USER": "sandbox",
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
_NOSUID_NODEV = sc.MS_NOSUID | sc.MS_NODEV


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(*, template: str, staged: list[tuple[str, str]], outer_uid: int, outer_gid: int,
          session_disk_bytes: int | None = None) -> str:
    """Map ids, build the worker's mounts on the template and pivot into it.

    Returns the working directory user code will start in.
    """
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{SANDBOX_UID} {outer_uid} 1\n")
    _write("/proc/self/gid_map", f"{SANDBOX_GID} {outer_gid} 1\n")
    root = template
    # Mounts copied from the zygote's namespace are locked; pivot_root needs a root of our own.
    sc.mount(root, root, None, sc.MS_BIND | sc.MS_REC)
    sc.mount("work", f"{root}/work", "tmpfs", _NOSUID_NODEV, "mode=0755,size=128m")
    sc.mount("tmp", f"{root}/tmp", "tmpfs", _NOSUID_NODEV, "mode=1777,size=64m")
    sc.mount("shm", f"{root}/dev/shm", "tmpfs", _NOSUID_NODEV | sc.MS_NOEXEC,
             "mode=1777,size=64m")
    sc.mount("inputs", f"{root}/inputs", "tmpfs", _NOSUID_NODEV | sc.MS_NOEXEC,
             "mode=0755,size=64m")
    cwd = "/work"
    if session_disk_bytes is not None:
        # The session's files outlive interpreter restarts: they live as long as the holder.
        sc.mount("data", f"{root}/mnt/data", "tmpfs", _NOSUID_NODEV,
                 f"mode=0755,size={session_disk_bytes}")
        cwd = "/mnt/data"
    for stage, path in staged:
        # Runtime directories under /work or /tmp reappear inside the fresh file systems.
        os.makedirs(f"{root}{path}", exist_ok=True)
        sc.mount(f"{root}{stage}", f"{root}{path}", None, sc.MS_BIND | sc.MS_REC)
    sc.mount("proc", f"{root}/proc", "proc", _NOSUID_NODEV | sc.MS_NOEXEC)
    os.chdir(root)
    sc.pivot_root(".", ".")
    sc.umount(".", sc.MNT_DETACH)
    os.chdir("/")
    sc.sethostname("corral")
    os.environ.clear()
    os.environ.update(SANDBOX_ENV)
    os.makedirs("/tmp/matplotlib", exist_ok=True)
    return cwd


def seal(
    *,
    work_bytes: int,
    memory_bytes: int,
    cpu_seconds: int,
    pids: int,
    file_bytes: int,
    open_files: int,
    seccomp_bpf: bytes,
    inputs_written: bool,
) -> None:
    """Apply the request's limits and drop every privilege; irreversible."""
    sc.mount(None, "/work", None, sc.MS_REMOUNT | _NOSUID_NODEV, f"size={work_bytes}")
    sc.mount(None, "/tmp", None, sc.MS_REMOUNT | _NOSUID_NODEV, f"size={work_bytes}")
    if inputs_written:
        sc.mount(None, "/inputs", None,
                 sc.MS_REMOUNT | _NOSUID_NODEV | sc.MS_NOEXEC | sc.MS_RDONLY)
    vm_size = _current_vm_bytes()
    for limit, value in (
        (resource.RLIMIT_AS, vm_size + memory_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_NPROC, pids),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    sc.drop_capabilities()
    sc.set_no_new_privs()
    sc.load_seccomp_bpf(seccomp_bpf)


def _current_vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
