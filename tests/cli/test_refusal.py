"""Without user namespaces the engine refuses to start, and says why."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CORRAL = str(Path(sys.executable).with_name("corral"))


@pytest.mark.isolation
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_run_refuses_to_start_without_user_namespaces() -> None:
    # A user namespace of our own whose limit on nested user namespaces is 0: the host as a
    # kernel without them would look to corral.
    script = f'echo 0 > /proc/sys/user/max_user_namespaces && exec {CORRAL} run -c "print(1)"'
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr  # a start-up failure, in one line
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "1\n" not in done.stdout
    assert "namespaces" in done.stderr
    assert "corral doctor" in done.stderr
