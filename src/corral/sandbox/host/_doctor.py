"""What this kernel offers for isolation, and what corral will use (``corral doctor``)."""

from __future__ import annotations

import ctypes.util
import os
import platform
import signal
from dataclasses import dataclass

from corral.errors import IsolationError
from corral.sandbox import _syscalls as sc
from corral.sandbox.host._cgroups import discover

__all__ = ["DoctorReport", "Feature", "doctor"]

_ALL_NAMESPACES = (
    sc.CLONE_NEWUSER
    | sc.CLONE_NEWPID
    | sc.CLONE_NEWNS
    | sc.CLONE_NEWNET
    | sc.CLONE_NEWIPC
    | sc.CLONE_NEWUTS
)


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    available: bool
    required: bool
    detail: str


@dataclass(frozen=True, slots=True)
class DoctorReport:
    features: tuple[Feature, ...]

    @property
    def ok(self) -> bool:
        return all(f.available for f in self.features if f.required)

    @property
    def problems(self) -> list[str]:
        return [f"{f.name}: {f.detail}" for f in self.features if f.required and not f.available]

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "features": [
                {
                    "name": f.name,
                    "available": f.available,
                    "required": f.required,
                    "detail": f.detail,
                }
                for f in self.features
            ],
        }


def _probe_namespaces() -> Feature:
    """Clone a child into every namespace corral uses and let it report success."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return Feature("namespaces", False, True, f"fork failed: {exc}")
    if pid == 0:  # a plain child, so the probe never clones from a threaded parent
        status = 1
        try:
            os.close(read_end)
            child = sc.clone_namespaces(_ALL_NAMESPACES)
            if child == 0:
                os._exit(0)
            _, code = os.waitpid(child, 0)
            status = 0 if os.waitstatus_to_exitcode(code) == 0 else 2
            os.write(write_end, b"ok")
        except OSError as exc:
            os.write(write_end, str(exc).encode()[:200])
        finally:
            os._exit(status)
    os.close(write_end)
    message = os.read(read_end, 256).decode(errors="replace")
    os.close(read_end)
    os.waitpid(pid, 0)
    if message == "ok":
        return Feature(
            "namespaces",
            True,
            True,
            "user, pid, mount, network, ipc and uts namespaces can be created",
        )
    return Feature(
        "namespaces",
        False,
        True,
        f"cannot create user/pid/mount/net/ipc/uts namespaces ({message}); "
        "enable unprivileged user namespaces (kernel.unprivileged_userns_clone=1, "
        "user.max_user_namespaces>0) or run on a kernel that has them",
    )


def _sysctl(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def doctor() -> DoctorReport:
    """Probe the kernel; every feature says whether corral needs it and what it found."""
    features = [
        Feature(
            "linux",
            platform.system() == "Linux",
            True,
            f"{platform.system()} {platform.release()} {platform.machine()}",
        )
    ]
    if platform.system() != "Linux":
        return DoctorReport(tuple(features))
    features.append(_probe_namespaces())
    max_userns = _sysctl("/proc/sys/user/max_user_namespaces")
    features.append(
        Feature("user.max_user_namespaces", max_userns not in (None, "0"), False, f"{max_userns}")
    )
    seccomp_lib = ctypes.util.find_library("seccomp")
    features.append(
        Feature(
            "libseccomp",
            seccomp_lib is not None,
            True,
            seccomp_lib or "libseccomp.so.2 not found (apt install libseccomp2)",
        )
    )
    status = _sysctl("/proc/self/status") or ""
    has_seccomp = "Seccomp:" in status
    features.append(
        Feature(
            "seccomp",
            has_seccomp,
            True,
            "seccomp filters supported"
            if has_seccomp
            else "kernel built without CONFIG_SECCOMP_FILTER",
        )
    )
    has_pidfd = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
    if has_pidfd:
        try:
            os.close(os.pidfd_open(os.getpid()))
        except OSError:
            has_pidfd = False
    features.append(
        Feature(
            "pidfd",
            has_pidfd,
            True,
            "pidfd_open and pidfd_send_signal" if has_pidfd else "needs Linux >= 5.3",
        )
    )
    root = os.geteuid() == 0
    features.append(
        Feature(
            "root",
            root,
            True,
            "corral builds the sandbox root as root, then drops to a uid of its own range"
            if root
            else "run corral as root (it drops privileges itself)",
        )
    )
    features.append(_cgroups(root))
    return DoctorReport(tuple(features))


def _cgroups(root: bool) -> Feature:
    """Which cgroup controllers would bound each sandbox as a whole."""
    try:
        hierarchies = discover()
    except (IsolationError, OSError) as exc:
        return Feature(
            "cgroups", False, False, f"not in force ({exc}): each process is bounded alone"
        )
    version = hierarchies[0].version
    controllers = set().union(*(h.controllers for h in hierarchies))
    if version == 2:
        controllers &= {"memory", "pids", "cpu"}
        controllers.add("freezer")  # the v2 core's cgroup.freeze
    missing = sorted({"memory", "pids", "cpu", "freezer"} - controllers)
    where = ", ".join(sorted({h.path for h in hierarchies}))
    detail = f"v{version}, below {where}: {', '.join(sorted(controllers))} per sandbox" + (
        f" (missing: {', '.join(missing)})" if missing else ""
    )
    if not root:
        return Feature("cgroups", False, False, "not in force: corral must run as root")
    return Feature("cgroups", True, False, detail)
