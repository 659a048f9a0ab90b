"""``get_metrics()``: a sandbox's CPU, memory and disk, sampled as E2B samples them.

Every ``SAMPLE_SECONDS`` a sandbox's own cgroup is read (its session's: every process it ever
started, commands included): CPU as a share of the CPUs it is shown to have since the sample
before, memory as what its processes and their kernel objects hold, the file pages among them
as the cache. Disk is what its folder holds against its quota. The last ``KEPT_SAMPLES`` are
kept; a request gets those within its ``start`` and ``end`` (Unix seconds), and a fresh one
taken then, so that a sandbox younger than one period has a sample too (the route is in
``_control``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio

from corral.engine import Session

__all__ = ["KEPT_SAMPLES", "SAMPLE_SECONDS", "Sample", "SandboxMetrics"]

SAMPLE_SECONDS = 5.0
"""E2B's own period."""
KEPT_SAMPLES = 720
"""An hour of samples."""
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    """Wall-clock seconds."""
    cpu_pct: float
    memory: int
    cache: int
    disk: int


class SandboxMetrics:
    """One sandbox's samples."""

    def __init__(self, session: Session, *, cpu_count: int, disk_total: int) -> None:
        self._session = session
        self.cpu_count = cpu_count
        self.disk_total = disk_total
        self.samples: deque[Sample] = deque(maxlen=KEPT_SAMPLES)
        self._last = (time.monotonic(), 0)
        """(monotonic seconds, CPU nanoseconds) of the sample before: its start at first."""

    async def sample(self) -> Sample:
        now, cpu = time.monotonic(), self._session.cpu_ns()
        before, used = self._last
        self._last = (now, cpu)
        elapsed = max(now - before, 1e-6)
        share = min(100.0, (cpu - used) / (elapsed * _NS * self.cpu_count) * 100.0)
        memory, cache = self._session.memory()
        # A sandbox paused to disk has no folder in memory: its files are in the data folder.
        state = self._session.pause_state
        disk = 0 if state.entry and not state.frozen else await self._session.files.usage()
        taken = Sample(time.time(), max(share, 0.0), memory, cache, disk)
        self.samples.append(taken)
        return taken

    async def follow(self) -> None:
        """Sample every period for as long as the sandbox lives (a session's background)."""
        while True:
            await anyio.sleep(SAMPLE_SECONDS)
            await self.sample()

    def as_e2b(self, sample: Sample, memory_total: int) -> dict[str, Any]:
        return {
            "timestamp": datetime.fromtimestamp(sample.at, UTC).isoformat().replace("+00:00", "Z"),
            "timestampUnix": int(sample.at),
            "cpuCount": self.cpu_count,
            "cpuUsedPct": round(sample.cpu_pct, 2),
            "memUsed": sample.memory,
            "memTotal": memory_total,
            "memCache": sample.cache,
            "diskUsed": sample.disk,
            "diskTotal": self.disk_total,
        }
