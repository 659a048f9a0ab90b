"""The walls seen from the HTTP API: a memory limit holds for all of a run's processes on
/run_code, and what sessions leave running is reported by /health and /metrics."""

from __future__ import annotations

import httpx
import pytest

from corral.engine import Engine
from tests.engine.test_hostile import CONFIRMED, GUARD
from tests.engine.test_walls import FORKS
from tests.http.httpkit import execute, open_session

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]


@pytest.fixture
def cgroups(real_engine: Engine) -> None:
    if not real_engine.cgroups_status.startswith("v"):
        pytest.skip(f"cgroups are {real_engine.cgroups_status}")


@pytest.mark.usefixtures("cgroups")
async def test_run_code_forks_past_memory_limit_mb_fail(real_client: httpx.AsyncClient) -> None:
    client = real_client
    body = {"code": GUARD + FORKS, "language": "python", "memory_limit_MB": 256}
    response = await client.post("/run_code", json=body, timeout=60)
    answer = response.json()
    assert response.status_code == 200, answer
    assert answer["run_result"]["stdout"].startswith(CONFIRMED), answer
    assert answer["status"] == "Failed", answer
    assert "held 3" not in answer["run_result"]["stdout"]


LOOPS = """
import subprocess, sys
loops = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
"""


@pytest.mark.usefixtures("cgroups")
async def test_health_and_metrics_count_what_sessions_leave_running(
    real_client: httpx.AsyncClient,
) -> None:
    client = real_client
    before = (await client.get("/health")).json()["background_processes"]
    session_id = await open_session(client)
    try:
        started = await execute(client, LOOPS, session_id)
        assert started["status"] == "SUCCESS", started
        health = (await client.get("/health")).json()
        assert health["running"] == 0
        assert health["background_processes"] == before + 2
        assert health["cgroups"].startswith("v")
        metrics = (await client.get("/metrics")).text
        lines = [line for line in metrics.splitlines() if line.startswith("corral_background")]
        assert any(line.endswith(" 2.0") for line in lines), lines
        assert "corral_tenant_cpu_seconds_total{tenant=" in metrics
    finally:
        await client.post("/v1/ops/code_interpreter/close_session", json={"sessionId": session_id})
    assert (await client.get("/health")).json()["background_processes"] == before
