"""Helpers shared by the benchmark scripts: sample statistics, /proc readings, tables.

Not part of corral: the scripts in ``bench/`` import this module by path, and nothing in
``src/`` may import it.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "WORKER_PROTOCOL_FD",
    "CpuMeter",
    "Samples",
    "blocked_reading",
    "children",
    "corral_quiet",
    "fd_count",
    "fmt",
    "in_sleep",
    "machine_busy_ms",
    "machine_summary",
    "private_kb",
    "proc_cpu_ms",
    "process_state",
    "render_table",
    "run_queue_wait_ms",
    "status_kb",
]


@dataclass(slots=True)
class Samples:
    """Latency samples of one case, in milliseconds."""

    name: str
    values: list[float] = field(default_factory=list)

    def add(self, ms: float) -> None:
        self.values.append(ms)

    def percentile(self, q: float) -> float:
        """Linear interpolation between closest ranks (numpy's default); NaN when empty."""
        if not self.values:
            return float("nan")
        ordered = sorted(self.values)
        pos = (len(ordered) - 1) * q
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    @property
    def p50(self) -> float:
        return self.percentile(0.5)

    @property
    def p90(self) -> float:
        return self.percentile(0.9)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "n": len(self.values),
            "p50_ms": self.p50,
            "p90_ms": self.p90,
            "min_ms": min(self.values, default=float("nan")),
            "max_ms": max(self.values, default=float("nan")),
            "mean_ms": statistics.fmean(self.values) if self.values else float("nan"),
        }


def fmt(value: float, digits: int = 2) -> str:
    """A number for a table cell; ``-`` for NaN."""
    if value != value:  # NaN
        return "-"
    return f"{value:.{digits}f}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, markdown: bool) -> str:
    """A markdown table, or the same columns aligned as plain text."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    if markdown:
        lines = [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def children(pid: int) -> list[int]:
    """Direct children of ``pid``: /proc/<pid>/task/*/children, else a scan of PPid."""
    task_dir = Path(f"/proc/{pid}/task")
    found: list[int] = []
    try:
        tasks = list(task_dir.iterdir())
    except OSError:
        return []
    listed = False
    for task in tasks:
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        listed = True
        found.extend(int(p) for p in text.split())
    if listed:
        return sorted(found)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ppid(int(entry.name)) == pid:
            found.append(int(entry.name))
    return sorted(found)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("PPid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


_READ_SYSCALL = {"x86_64": 0, "aarch64": 63}.get(platform.machine())
_NANOSLEEP_SYSCALLS = {"x86_64": ("35", "230"), "aarch64": ("101", "115")}.get(
    platform.machine(), ()
)
_POLL_SYSCALLS = {  # epoll_wait, epoll_pwait(2), poll, ppoll, select, pselect6
    "x86_64": ("232", "281", "441", "7", "271", "23", "270"),
    "aarch64": ("22", "441", "73", "72"),
}.get(platform.machine(), ())


def _syscall_nr(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/syscall") as syscall:
            return syscall.read().split(maxsplit=1)[0]
    except (OSError, IndexError):
        return ""


def blocked_reading(pid: int, fd: int) -> bool:
    """Whether ``pid`` sleeps in read(fd, ...): a ready worker waiting for its request."""
    try:
        with open(f"/proc/{pid}/syscall") as syscall:
            fields = syscall.read().split()
    except OSError:
        return False
    return (
        len(fields) > 1
        and _READ_SYSCALL is not None
        and fields[0] == str(_READ_SYSCALL)
        and int(fields[1], 16) == fd
    )


WORKER_PROTOCOL_FD = 3
"""Where a worker reads its request (``corral.sandbox.inside._runner.PROTOCOL_FD``)."""


def corral_quiet(zygote_pid: int) -> bool:
    """The zygote and all its descendants sleep, and every worker waits for a request.

    Workers sleep in read() on their protocol socket; a session's holder process sleeps in an
    event loop (epoll and the like), with or without a worker below it. Then no worker is
    being cloned, isolated, run or reaped: corral has nothing left to do.
    """
    if process_state(zygote_pid) != "S":
        return False
    pending = children(zygote_pid)
    while pending:
        pid = pending.pop()
        if process_state(pid) != "S":
            return False
        if not (blocked_reading(pid, WORKER_PROTOCOL_FD) or _syscall_nr(pid) in _POLL_SYSCALLS):
            return False
        pending.extend(children(pid))
    return True


def in_sleep(pid: int) -> bool:
    """Whether ``pid`` sleeps in nanosleep or clock_nanosleep (``time.sleep``)."""
    return _syscall_nr(pid) in _NANOSLEEP_SYSCALLS


def process_state(pid: int) -> str:
    """The one-letter state of /proc/<pid>/stat (R, S, D, Z, ...); ``?`` when gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def status_kb(pid: int, key: str) -> int | None:
    """A ``kB`` field of /proc/<pid>/status (``VmRSS``, ``RssAnon``, ...)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def private_kb(pid: int) -> int | None:
    """Private_Clean + Private_Dirty from /proc/<pid>/smaps_rollup: memory only it holds."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1])
    except OSError:
        return None
    return total


def fd_count(pid: int) -> int | None:
    """Open file descriptors of ``pid``."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def machine_summary() -> str:
    """One line naming the machine the numbers come from."""
    return (
        f"{os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {sys.version.split()[0]} ({sys.executable})"
    )


def proc_cpu_ms(pid: int) -> tuple[float, float]:
    """(own, waited-for children) CPU milliseconds of ``pid``, from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) * tick, (cutime + cstime) * tick


def machine_busy_ms() -> float:
    """CPU milliseconds all CPUs together spent not idle, from /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) * 1000.0 / os.sysconf("SC_CLK_TCK")


def run_queue_wait_ms(pid: int) -> float:
    """Milliseconds the threads of ``pid`` spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
                total += int(schedstat.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e6


class CpuMeter:
    """CPU used by the whole machine against CPU used by the processes we measure.

    The difference is other load on the machine (and kernel threads working for us), which
    makes latency numbers unreliable when it is large.
    """

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids
        self._start = self._read()
        self._wait0 = 0.0
        self._wait0 = self.run_queue_wait_ms()

    def _read(self) -> tuple[float, float, float]:
        own = os.times()
        ours = (own.user + own.system + own.children_user + own.children_system) * 1000.0
        ours += sum(sum(proc_cpu_ms(pid)) for pid in self._pids)
        return time.perf_counter() * 1000.0, machine_busy_ms(), ours

    def run_queue_wait_ms(self) -> float:
        """How long this process and the watched ones waited for a CPU since the start."""
        return sum(run_queue_wait_ms(pid) for pid in (os.getpid(), *self._pids)) - self._wait0

    def foreign_share(self) -> float:
        """Share of the machine's CPU capacity used by others since the meter started."""
        wall, busy, ours = (b - a for a, b in zip(self._start, self._read(), strict=True))
        capacity = wall * (os.cpu_count() or 1)
        return max(0.0, busy - ours) / capacity if capacity > 0 else 0.0
