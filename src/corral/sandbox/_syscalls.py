"""Thin ctypes bindings for the Linux calls the sandbox needs and Python 3.11 lacks.

Raw ``clone`` with namespace flags is the one unusual piece: the zygote is single-threaded,
so a clone that shares nothing behaves like ``fork`` and we run CPython's own before/after
fork hooks around it, exactly as ``os.fork`` does.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Callable
from typing import TypeVar

__all__ = [
    "CLONE_NEWCGROUP",
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "MNT_DETACH",
    "MS_BIND",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "MS_REMOUNT",
    "as_fs_owner",
    "clone_namespaces",
    "drop_capabilities",
    "hide_command_line",
    "keep_only_capabilities",
    "load_seccomp_bpf",
    "mount",
    "pivot_root",
    "sched_getattr",
    "set_child_subreaper",
    "set_dumpable",
    "set_no_new_privs",
    "set_pdeathsig",
    "sethostname",
    "umount",
    "unshare",
    "write_all",
]

T = TypeVar("T")

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_SECCOMP = 22
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_KEEPCAPS = 8
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as last:
            return int(last.read())
    except (OSError, ValueError):
        return 63  # the most a 64-bit capability set can hold


_CAP_LAST = _last_capability()
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_SYSCALLS = {
    "x86_64": {"clone": 56, "pivot_root": 155, "capset": 126, "sched_getattr": 315},
    "aarch64": {"clone": 220, "pivot_root": 41, "capset": 91, "sched_getattr": 275},
}
_NR = _SYSCALLS.get(platform.machine(), {})

_libc = ctypes.CDLL(None, use_errno=True)
# PyDLL keeps the GIL held across the call, as os.fork() does around fork().
_pylibc = ctypes.PyDLL(None, use_errno=True)
_pylibc.syscall.restype = ctypes.c_long
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def _nr(name: str) -> int:
    try:
        return _NR[name]
    except KeyError:
        raise OSError(f"corral's sandbox does not support {platform.machine()}") from None


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def clone_namespaces(flags: int) -> int:
    """Fork into new namespaces; returns the child's pid in the parent and 0 in the child.

    Only call this from a single-threaded process.
    """
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _pylibc.syscall(_nr("clone"), ctypes.c_ulong(flags | 17), None, None, None, None)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
    else:
        err = ctypes.get_errno()
        ctypes.pythonapi.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(err, f"clone: {os.strerror(err)}")
    return int(pid)


def mount(
    source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None
) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(os.fsencode(target), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    _check(
        _libc.syscall(_nr("pivot_root"), os.fsencode(new_root), os.fsencode(put_old)), "pivot_root"
    )


_SCHED_ATTR = struct.Struct("=IIQiIQQQII")
"""struct sched_attr as of Linux 5.3 (size, policy, flags, nice, priority, runtime, deadline,
period, util_min, util_max); an older kernel fills its first 48 bytes and leaves the rest."""


def sched_getattr() -> tuple[int, ...]:
    """This thread's whole scheduling state, as ``sched_getattr`` tells it: policy, flags
    (reset-on-fork), nice, real-time priority, deadline parameters, utilisation clamps."""
    buffer = ctypes.create_string_buffer(_SCHED_ATTR.size)
    _check(
        _libc.syscall(
            _nr("sched_getattr"), 0, buffer, ctypes.c_uint(_SCHED_ATTR.size), ctypes.c_uint(0)
        ),
        "sched_getattr",
    )
    return tuple(_SCHED_ATTR.unpack(buffer.raw)[1:])


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), "sethostname")


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _check(_libc.prctl(option, arg2, arg3, 0, 0), f"prctl({option})")


def set_no_new_privs() -> None:
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def set_dumpable(value: bool) -> None:
    _prctl(_PR_SET_DUMPABLE, int(value))


def set_child_subreaper() -> None:
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def set_pdeathsig(signum: int) -> None:
    _prctl(_PR_SET_PDEATHSIG, signum)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets."""
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() != 22:
            _check(-1, f"PR_CAPBSET_DROP {cap}")
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(_nr("capset"), ctypes.byref(header), ctypes.byref(data)), "capset")


def keep_only_capabilities(caps: tuple[int, ...], uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good while keeping ``caps`` (and nothing else) effective.

    Call as root: the bounding set shrinks to ``caps`` first (that needs CAP_SETPCAP), then
    keep-caps carries the permitted set across setresuid, and capset trims it.
    """
    for cap in range(_CAP_LAST + 1):
        if cap in caps:
            continue
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() != 22:
            _check(-1, f"PR_CAPBSET_DROP {cap}")
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    os.setgroups([])
    _prctl(_PR_SET_KEEPCAPS, 1)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _prctl(_PR_SET_KEEPCAPS, 0)
    mask = sum(1 << cap for cap in caps)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = mask & 0xFFFFFFFF
    data[1].effective = data[1].permitted = mask >> 32
    _check(_libc.syscall(_nr("capset"), ctypes.byref(header), ctypes.byref(data)), "capset")


_STAT_ARG_START = 45  # /proc/self/stat fields 48 and 49, counted after the ")" of comm


def hide_command_line(shown: bytes) -> None:
    """Make /proc/self/cmdline (and every fork's) read ``shown`` instead of the real argv.

    PR_SET_MM could point the kernel elsewhere, but needs CAP_SYS_RESOURCE, which containers
    often lack; instead the original argv area is overwritten in place (CPython keeps its own
    copies). Its last byte is left non-zero, the sign of setproctitle(3) the kernel honours
    by reading only up to the first NUL.
    """
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[_STAT_ARG_START]), int(fields[_STAT_ARG_START + 1])
    if end - start < len(shown) + 2:
        raise OSError(f"the command line is too short to hold {shown!r}")
    ctypes.memset(start, 0, end - start)
    ctypes.memmove(start, shown, len(shown))
    ctypes.memset(end - 1, ord(" "), 1)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp_bpf(program: bytes) -> None:
    """Install a classic-BPF seccomp program (8 bytes per instruction); needs no_new_privs."""
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp"
    )


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def as_fs_owner(uid: int, gid: int, action: Callable[[], T]) -> T:
    """Run ``action`` with this thread's file-system uid and gid set to ``uid`` and ``gid``.

    setfsuid/setfsgid change only the calling thread's credentials, and nothing else runs on
    this thread until they are restored.
    """
    previous_gid = _libc.setfsgid(gid)
    previous_uid = _libc.setfsuid(uid)
    try:
        return action()
    finally:
        _libc.setfsuid(previous_uid)
        _libc.setfsgid(previous_gid)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to a blocking ``fd`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
