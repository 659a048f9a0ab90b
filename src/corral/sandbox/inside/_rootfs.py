"""The worker's root file system: built once by the zygote, entered by every worker.

The zygote (still root, in a private mount namespace) assembles a template tree on a tmpfs:
read-only binds of ``/usr`` and of the Python runtime and packages, a minimal ``/etc`` and
``/dev``, and empty mount points. Each worker then mounts its own tmpfs ``/work``, ``/tmp``,
``/inputs`` and ``/proc`` onto the template and pivots into it, so nothing else of the host
exists for it. Paths keep their host names because preloaded modules remember where they came
from; only the directories that hold the runtime are bound, never their parents' contents.
"""

from __future__ import annotations

import os
import site
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path

from corral.sandbox import _syscalls as sc

__all__ = [
    "DATA_STAGE",
    "DATA_TARGET",
    "OVERLAID",
    "PROC_MASKS",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "STAGE",
    "build_template",
    "enter_base",
    "runtime_paths",
    "template_root",
]

_TEMPLATE_PARENTS = ("/run", "/mnt", "/media", "/srv", "/opt", "/var/tmp", "/tmp")
STAGE = "/.corral-runtime"
DATA_STAGE = "/.corral-data"
"""Where a host data folder (container mode's ``MOUNT_FOLDER``) waits in the template; only
session holders bind it, every other worker covers it with an empty file system."""
DATA_TARGET = "/etc/corral-data-path"
"""A template file naming the data folder's host path, where holders bind it a second time."""
"""Where runtime directories that live under a worker-owned mount point are staged."""
OVERLAID = ("/work", "/tmp", "/inputs", "/mnt", "/proc", "/dev", "/etc")
"""Mount points each worker covers with its own file systems."""
SANDBOX_UID = 1000
SANDBOX_GID = 1000

MASKS = "/.corral-masks"
"""Where the template keeps the files that cover host-revealing entries of a worker's /proc."""
PROC_MASKS: list[tuple[str, str]] = []
"""(mask under MASKS, path under /proc) pairs this host needs; filled by build_template."""
_EMPTY = "empty"
_PRESSURE_ZERO = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)
# What a worker's /proc would tell of the host and of other tenants: the kernel's command
# line and build config, the boot id (a host fingerprint), and the load and pressure
# figures, which follow every other tenant's activity.
_MASKED_FILES = {
    "cmdline": _EMPTY,
    "config.gz": _EMPTY,
    "sys/kernel/random/boot_id": "boot_id",
    "loadavg": "loadavg",
}

_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_MOUNT_POINTS = ("proc", "work", "tmp", "inputs", "mnt/data", "home/user", "dev/shm")
_ETC_FILES = {
    "passwd": "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:corral sandbox:/work:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "hostname": "corral\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}
_ETC_COPIES = ("ld.so.cache", "localtime", "mime.types")


def runtime_paths(extra: Iterable[str] = ()) -> list[str]:
    """Host directories a worker needs, outermost first, without nesting duplicates."""
    import corral

    candidates = {
        sys.base_prefix,
        sys.prefix,
        sys.exec_prefix,
        *site.getsitepackages(),
        str(Path(corral.__file__).resolve().parent),
        *extra,
    }
    for entry in sys.path:
        resolved = Path(entry or ".").resolve()
        if resolved.is_dir() and not (resolved / "corral").is_dir():
            candidates.add(str(resolved))
    real = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
    kept: list[str] = []
    for path in real:
        if path == "/" or any(path.startswith(f"{k}/") or path == k for k in kept):
            continue
        if any(_under(point, path) for point in OVERLAID):
            continue  # binding it would cover a worker's own /work, /tmp, ...
        if any(path == f"/{d}" or path.startswith(f"/{d}/") for d in _SYSTEM_DIRS):
            continue  # already inside a system bind
        kept.append(path)
    return kept


def _bind_readonly(source: str, target: str) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Path(target).touch()
    sc.mount(source, target, None, sc.MS_BIND | sc.MS_REC)
    sc.mount(None, target, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NOSUID)


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent + "/")


def template_root(paths: Iterable[str]) -> str:
    """A host directory to cover with the template: one no runtime path lives under."""
    paths = list(paths)
    for parent in _TEMPLATE_PARENTS:
        if os.path.isdir(parent) and not any(_under(p, parent) for p in paths):
            return parent + "/.corral-root"
    raise OSError("no directory to build the sandbox root in (tried /run, /mnt, /tmp, ...)")


def _data_target(data_dir: str, paths: list[str]) -> str | None:
    """The host path a data folder may also appear at inside, or None where it cannot."""
    blocked = (*OVERLAID, *(f"/{d}" for d in _SYSTEM_DIRS), STAGE, DATA_STAGE)
    if data_dir == "/mnt/data" or not data_dir.startswith("/") or data_dir == "/":
        return None
    if data_dir.startswith("/mnt/"):
        return data_dir if not _under(data_dir, "/mnt/data") else None
    if any(_under(data_dir, b) for b in blocked):
        return None
    if any(_under(data_dir, p) or _under(p, data_dir) for p in paths):
        return None
    return data_dir


def build_template(
    paths: Iterable[str], *, data_dir: str | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """Build the template root; call as root after unsharing the mount namespace.

    Args:
        data_dir: a host folder session holders bind read-write as their ``/mnt/data``
            (and at its own path), instead of a tmpfs.

    Returns the template's path and the runtime directories staged because they live under
    a worker-owned mount point, as (staged path, path) pairs inside the sandbox.
    """
    paths = list(paths)
    template = template_root(paths)
    # Held open: the template's own tmpfs may cover the folder's parent (/mnt) by path.
    data_fd = None if data_dir is None else os.open(data_dir, os.O_PATH | os.O_DIRECTORY)
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    base = os.path.dirname(template)
    sc.mount("corral", base, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=0755,size=1m")
    os.makedirs(template, mode=0o755)
    sc.mount("corral-root", template, "tmpfs", sc.MS_NOSUID, "mode=0755,size=16m")
    root = Path(template)

    for name in _SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            _bind_readonly(str(host), str(root / name))
    staged: list[tuple[str, str]] = []
    for path in paths:
        if any(_under(path, point) for point in OVERLAID):
            stage = f"{STAGE}/{len(staged)}"
            _bind_readonly(path, str(root) + stage)
            staged.append((stage, path))
        else:
            _bind_readonly(path, str(root) + path)

    etc = root / "etc"
    etc.mkdir(mode=0o755)
    for name, text in _ETC_FILES.items():
        (etc / name).write_text(text)
    for name in _ETC_COPIES:
        host = Path("/etc") / name
        if host.is_file():
            (etc / name).write_bytes(host.read_bytes())

    dev = root / "dev"
    dev.mkdir(mode=0o755)
    for name in _DEVICES:
        _bind_readonly(f"/dev/{name}", str(dev / name))
        sc.mount(
            None, str(dev / name), None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_NOSUID | sc.MS_NOEXEC
        )
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        (dev / name).symlink_to(target)

    for name in _MOUNT_POINTS:
        (root / name).mkdir(mode=0o755, parents=True, exist_ok=True)
    if data_dir is not None and data_fd is not None:
        # Read-write (the session's files), but never setuid or device files.
        data_stage = root / DATA_STAGE.lstrip("/")
        data_stage.mkdir(mode=0o755)
        sc.mount(f"/proc/self/fd/{data_fd}", str(data_stage), None, sc.MS_BIND)
        os.close(data_fd)
        remount = sc.MS_REMOUNT | sc.MS_BIND | sc.MS_NOSUID | sc.MS_NODEV
        sc.mount(None, str(data_stage), None, remount)
        data_target = _data_target(os.path.realpath(data_dir), paths)
        if data_target is not None:
            (root / data_target.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
        (root / DATA_TARGET.lstrip("/")).write_text(data_target or "")
    _build_masks(root / MASKS.lstrip("/"))
    sc.mount(None, template, None, sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID)
    return template, staged


def _build_masks(masks: Path) -> None:
    masks.mkdir(mode=0o755)
    (masks / _EMPTY).write_text("")
    (masks / "loadavg").write_text("0.00 0.00 0.00 1/1 1\n")
    (masks / "boot_id").write_text(f"{uuid.uuid4()}\n")  # this zygote's, not the host's
    PROC_MASKS.clear()
    for target, mask in _MASKED_FILES.items():
        if os.path.exists(f"/proc/{target}"):
            PROC_MASKS.append((mask, target))
    if os.path.isdir("/proc/pressure"):
        pressure = masks / "pressure"
        pressure.mkdir(mode=0o555)
        for name in sorted(os.listdir("/proc/pressure")):
            (pressure / name).write_text(_PRESSURE_ZERO)
        PROC_MASKS.append(("pressure", "pressure"))


def enter_base(template: str) -> str:
    """Make the template's base the zygote's whole file system; returns the template's path.

    Every worker's mount namespace starts as a copy of the zygote's: with the host's mounts
    gone from it, each clone copies and each exit tears down a handful of mounts, not dozens.
    Its own /proc stays: set-up code reads /proc/self, and the kernel lets a user namespace
    mount proc only where a fully visible one exists.
    """
    base = os.path.dirname(template)
    sc.mount(None, base, None, sc.MS_REMOUNT | sc.MS_NOSUID | sc.MS_NODEV, "mode=0755,size=1m")
    os.makedirs(f"{base}/proc", mode=0o555, exist_ok=True)
    sc.mount("proc", f"{base}/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    os.chdir(base)
    sc.pivot_root(".", ".")
    sc.umount(".", sc.MNT_DETACH)
    os.chdir("/")
    return "/" + os.path.basename(template)
