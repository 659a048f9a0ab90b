"""What this host's kernel offers, for tests that skip (and say why) without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def autogroups_in_force() -> None:
    """Skip unless the host's scheduler groups each session's processes (autogroups)."""
    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("needs a kernel with CONFIG_SCHED_AUTOGROUP")
    if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
        pytest.skip("autogroups are off on this host (kernel.sched_autogroup_enabled = 0)")
