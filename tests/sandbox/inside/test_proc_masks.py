"""A worker's /proc covers what tells of the host: read from inside real workers, checked
against what this test process (on the host) reads of the same files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from corral.engine import Engine

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

EMPTY = ("buddyinfo", "crypto", "misc", "iomem", "ioports")
LISTED = (
    "fs/ext4",
    "sys/fs/dentry-state",
    "sys/fs/inode-nr",
    "cgroups",
    "bus/pci/devices",
    "partitions",
    "version",
    "devices",
    *EMPTY,
)
"""The host-revealing /proc entries issue 18 lists (``fs/ext4`` holds live cache counters)."""

_PROBE = """\
import json, os
def read(path):
    try:
        if os.path.isdir(path):
            return sorted(os.listdir(path))
        return open(path, 'rb').read().decode('latin-1')
    except OSError as exc:
        return exc.errno
paths = ['/proc/' + p for p in {paths!r}]
sys_fs = {{}}
for folder, _, files in os.walk('/proc/sys/fs'):
    for name in files:
        sys_fs[os.path.relpath(os.path.join(folder, name), '/proc/sys/fs')] = \\
            read(os.path.join(folder, name))
print(json.dumps({{'read': {{p[6:]: read(p) for p in paths + ['/proc/fs', '/proc/bus']}},
                  'sys_fs': sys_fs, 'cpus': os.cpu_count()}}))
"""


@pytest.fixture(scope="module")
async def seen(engine: Engine) -> dict[str, Any]:
    """What one worker reads of every listed entry, of /proc/sys/fs and of its CPU count."""
    result = await engine.run(_PROBE.format(paths=LISTED))
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr)
    observed: dict[str, Any] = json.loads(result.stdout)
    return observed


def _host(path: str) -> str:
    full = Path("/proc") / path
    if not full.exists():
        pytest.skip(f"this host has no /proc/{path}")
    return "" if full.is_dir() else full.read_bytes().decode("latin-1")


def _host_sys_fs() -> dict[str, tuple[int, str]]:
    """Each file of the host's /proc/sys/fs: its mode and its text."""
    _host("sys/fs")
    host: dict[str, tuple[int, str]] = {}
    for folder, _dirs, files in os.walk("/proc/sys/fs"):
        for name in files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and mode & stat.S_IRUSR:
                host[os.path.relpath(path, "/proc/sys/fs")] = (mode, Path(path).read_text())
    return host


def _fields(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("path", EMPTY)
async def test_hardware_and_allocator_files_read_empty(seen: dict[str, Any], path: str) -> None:
    _host(path)
    assert seen["read"][path] == ""


async def test_ext4_counters_and_pci_devices_are_gone(seen: dict[str, Any]) -> None:
    _host("fs/ext4")
    _host("bus/pci/devices")
    assert seen["read"]["fs/ext4"] == seen["read"]["bus/pci/devices"] == 2  # ENOENT
    assert seen["read"]["fs"] == seen["read"]["bus"] == []


async def test_dentry_and_inode_counts_read_as_zeros(seen: dict[str, Any]) -> None:
    dentries = _fields(_host("sys/fs/dentry-state"))
    assert _fields(seen["read"]["sys/fs/dentry-state"]) == [
        dentries[2] if index == 2 else "0" for index in range(len(dentries))
    ]  # the age limit is a setting, the rest counts every tenant's lookups
    _host("sys/fs/inode-nr")
    assert _fields(seen["read"]["sys/fs/inode-nr"]) == ["0", "0"]


async def test_cgroups_and_partitions_keep_only_their_headers(seen: dict[str, Any]) -> None:
    cgroups = _host("cgroups").splitlines()
    assert seen["read"]["cgroups"].splitlines() == cgroups[:1]
    partitions = _host("partitions")
    assert _fields(seen["read"]["partitions"]) == _fields(partitions.splitlines()[0])


async def test_version_and_devices_tell_only_what_the_worker_has(seen: dict[str, Any]) -> None:
    host_version = _host("version")
    uname = os.uname()
    assert seen["read"]["version"] == f"{uname.sysname} version {uname.release} {uname.version}\n"
    assert seen["read"]["version"] != host_version  # no build host, compiler or date
    _host("devices")
    # The worker's /dev is null, zero, full, random and urandom: all of major 1.
    assert seen["read"]["devices"] == "Character devices:\n  1 mem\n\nBlock devices:\n"


async def test_sys_fs_settings_read_as_on_the_host_and_counters_as_zeros(
    seen: dict[str, Any],
) -> None:
    host = _host_sys_fs()
    assert set(seen["sys_fs"]) == set(host)
    for name, (mode, text) in host.items():
        inside = seen["sys_fs"][name]
        if mode & stat.S_IROTH == 0:
            assert inside == 13, name  # EACCES, as on the host
        elif mode & 0o222:
            assert inside == text, name  # a setting
        elif name == "file-nr":
            assert _fields(inside) == ["0", "0", _fields(text)[2]]  # file-max stays
        elif name != "dentry-state":
            assert set(_fields(inside)) <= {"0"}, (name, inside)


async def test_the_cpu_count_still_reads_as_the_hosts(seen: dict[str, Any]) -> None:
    # glibc counts CPUs in /proc/stat (the worker has no /sys): the masks must leave it.
    assert seen["cpus"] == os.cpu_count()
