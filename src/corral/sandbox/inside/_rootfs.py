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
from collections.abc import Iterable
from pathlib import Path

from corral.sandbox import _syscalls as sc
from corral.sandbox._control_protocol import NO_FILES, TEMPLATE_LAYER, WHEELHOUSE, SandboxFiles
from corral.sandbox.inside import _proc_masks

__all__ = [
    "CA_BUNDLE",
    "DATA_STAGE",
    "DATA_TARGET",
    "OVERLAID",
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

_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_MOUNT_POINTS = ("proc", "work", "tmp", "inputs", "mnt/data", "home/user", "dev/shm", "dev/pts")
_ETC_FILES = {
    "passwd": "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:corral sandbox:/work:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "hostname": "corral\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    # corral's resolver answers in a sandbox with a network; without one nothing listens
    # and a lookup fails at once, as it always did.
    "resolv.conf": "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n",
}
_ETC_COPIES = ("ld.so.cache", "localtime", "mime.types")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
"""The sandbox's CA bundle: the host's, and corral's own CA when it intercepts a host's TLS
to add headers (every TLS client in the sandbox is pointed at it)."""


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


def _bind_readonly(source: str, target: str, *, nodev: bool = False) -> None:
    """``source`` at ``target``, read-only and nosuid (and nodev: a host folder of files,
    not one of the devices bound one by one)."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Path(target).touch()
    sc.mount(source, target, None, sc.MS_BIND | sc.MS_REC)
    flags = sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NOSUID
    sc.mount(None, target, None, flags | (sc.MS_NODEV if nodev else 0))


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
    paths: Iterable[str], *, data_dir: str | None = None, files: SandboxFiles = NO_FILES
) -> tuple[str, list[tuple[str, str]]]:
    """Build the template root; call as root after unsharing the mount namespace.

    Args:
        data_dir: a host folder session holders bind read-write as their ``/mnt/data``
            (and at its own path), instead of a tmpfs.
        files: what the root adds to the host's files (a CA, pip's index, a wheelhouse).

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
    _write_ca_bundle(root, files.extra_ca)
    for name, text in files.etc:
        (etc / name).parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        (etc / name).write_text(text)
    if files.wheelhouse:
        _bind_readonly(files.wheelhouse, str(root) + WHEELHOUSE, nodev=True)
    for folder in files.toolchains:
        # A language's toolchain outside /usr (a rustup sysroot under /root, a JDK's settings
        # under /etc) at its own path, read-only: the sandbox's uid runs the host's files.
        if not any(_under(folder, p) for p in (*paths, *(f"/{d}" for d in _SYSTEM_DIRS))):
            _bind_readonly(folder, str(root) + folder, nodev=True)
    if files.layer:
        # A template's layer: what its build made, never writable by what runs on it.
        _bind_readonly(files.layer, str(root) + TEMPLATE_LAYER, nodev=True)

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
        ("ptmx", "pts/ptmx"),  # a session's own devpts (_isolate); a one-shot run has none
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
    _proc_masks.build(root / _proc_masks.MASKS.lstrip("/"))
    sc.mount(None, template, None, sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID)
    return template, staged


def _write_ca_bundle(root: Path, extra_ca: str) -> None:
    bundle = root / CA_BUNDLE.lstrip("/")
    bundle.parent.mkdir(mode=0o755, parents=True)
    host = Path(CA_BUNDLE)
    text = host.read_bytes() if host.is_file() else b""
    bundle.write_bytes(text + (b"\n" + extra_ca.encode() if extra_ca else b""))


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
