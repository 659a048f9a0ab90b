"""What a worker's ``/proc`` shows instead of what would tell of the host and its tenants.

A worker mounts a proc of its own (its pid namespace's), but most of proc is the host's: the
kernel's command line, build and config; its hardware (``iomem``, ``ioports``, ``bus/pci``,
``devices``, ``misc``, ``partitions``, ``crypto``); the boot id, a host fingerprint; and live
figures that follow every other tenant's activity (``loadavg``, ``pressure/*``, the page
allocator's ``buddyinfo``, ext4's cache counters under ``fs``, the dentry, inode, file and aio
counts under ``sys/fs``, ``cgroups``' counts). The zygote builds a cover for each, once, in the
template (``build``); every worker binds them over its fresh proc, one mount per cover and
per worker (``PROC_MASKS``).

Each mount costs every fresh run CPU, when it is made and again when the worker's mount
namespace is torn down, so whole folders are covered where nothing in them is needed:
``fs`` and ``bus`` by an empty folder, ``sys/fs`` by a read-only copy whose settings (the
entries root may write: ``file-max``, ``nr_open``, ``pipe-max-size``, ``inotify/*``, ...) read
as on the host and whose counters (those nobody may write) read as zeros. A file at proc's top
level takes a mount of its own: proc's root cannot be covered without hiding the worker's own
``/proc/self``.

What stays shared, and why, is in the README's Isolation section: ``meminfo``, ``cpuinfo``
and ``stat`` (glibc and numpy read them), ``uptime``, ``interrupts``, ``softirqs``, ``vmstat``,
``zoneinfo``, ``diskstats``, ``self/mountinfo``.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

__all__ = ["MASKS", "PROC_MASKS", "build"]

MASKS = "/.corral-masks"
"""Where the template keeps the covers of a worker's /proc entries."""
PROC_MASKS: list[tuple[str, str]] = []
"""(cover under MASKS, path under /proc) pairs this host needs; filled by ``build``."""

_EMPTY = "empty"
_EMPTY_FOLDER = "empty-folder"
_SYS_FS = "sys-fs"
_PRESSURE_ZERO = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)
_SYNTHESIZED = {
    "loadavg": "0.00 0.00 0.00 1/1 1\n",
    "cgroups": "#subsys_name\thierarchy\tnum_cgroups\tenabled\n",
    "partitions": "major minor  #blocks  name\n\n",
    # The worker's /dev holds only null, zero, full, random and urandom: major 1, "mem".
    "devices": "Character devices:\n  1 mem\n\nBlock devices:\n",
}
"""Covers that keep the file's shape (its header) for whatever parses it."""
_MASKED_FILES = {
    "cmdline": _EMPTY,
    "config.gz": _EMPTY,
    "sys/kernel/random/boot_id": "boot_id",
    "version": "version",
    "buddyinfo": _EMPTY,
    "crypto": _EMPTY,
    "misc": _EMPTY,
    "iomem": _EMPTY,
    "ioports": _EMPTY,
    **{name: name for name in _SYNTHESIZED},
}
_MASKED_FOLDERS = {"fs": _EMPTY_FOLDER, "bus": _EMPTY_FOLDER, "sys/fs": _SYS_FS}
_COUNTER_SETTINGS = {"file-nr": (2,), "dentry-state": (2,)}
"""Fields of a counter that are settings, kept as they are: file-nr's maximum (file-max),
dentry-state's age limit."""


def build(masks: Path) -> None:
    """Write the covers into ``masks`` (in the template, as root) and list in ``PROC_MASKS``
    those whose /proc entry this host has."""
    masks.mkdir(mode=0o755)
    (masks / _EMPTY).write_text("")
    (masks / "boot_id").write_text(f"{uuid.uuid4()}\n")  # this zygote's, not the host's
    uname = os.uname()
    # What uname(2) tells anyway, without the build host, compiler and build date.
    (masks / "version").write_text(f"{uname.sysname} version {uname.release} {uname.version}\n")
    for name, text in _SYNTHESIZED.items():
        (masks / name).write_text(text)
    (masks / _EMPTY_FOLDER).mkdir(mode=0o555)
    PROC_MASKS.clear()
    for target, mask in _MASKED_FILES.items():
        if os.path.isfile(f"/proc/{target}"):
            PROC_MASKS.append((mask, target))
    for target, mask in _MASKED_FOLDERS.items():
        if os.path.isdir(f"/proc/{target}"):
            PROC_MASKS.append((mask, target))
    if os.path.isdir("/proc/sys/fs"):
        _copy_sysctls(Path("/proc/sys/fs"), masks / _SYS_FS)
    if os.path.isdir("/proc/pressure"):
        pressure = masks / "pressure"
        pressure.mkdir(mode=0o555)
        for name in sorted(os.listdir("/proc/pressure")):
            (pressure / name).write_text(_PRESSURE_ZERO)
        PROC_MASKS.append(("pressure", "pressure"))


def _copy_sysctls(source: Path, target: Path) -> None:
    """A read-only copy of a /proc/sys folder: its settings as they are now, its counters (the
    entries nobody may write) as zeros. A folder on another file system (``binfmt_misc``) is
    copied empty, never entered."""
    target.mkdir()
    device = source.lstat().st_dev
    with os.scandir(source) as listing:
        entries = [(entry.name, entry.stat(follow_symlinks=False)) for entry in listing]
    for name, info in entries:
        if stat.S_ISDIR(info.st_mode):
            if info.st_dev == device:
                _copy_sysctls(source / name, target / name)
            else:
                (target / name).mkdir(mode=0o555)
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        try:
            text = (source / name).read_bytes()
        except OSError:  # one this process may not read: the worker could not either
            continue
        if not info.st_mode & 0o222:
            text = _zeroed(name, text)
        (target / name).write_bytes(text)
        (target / name).chmod(info.st_mode & 0o444)
    target.chmod(0o555)


def _zeroed(name: str, text: bytes) -> bytes:
    kept = _COUNTER_SETTINGS.get(name, ())
    fields = [field if index in kept else b"0" for index, field in enumerate(text.split())]
    return b"\t".join(fields) + b"\n"
