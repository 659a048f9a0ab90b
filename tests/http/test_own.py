"""corral's own endpoints: /v1/execute (the full result), /health, /metrics, /openapi.json."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import BOB, open_session

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]


async def test_execute_returns_the_full_result(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/execute", json={"code": "print(6 * 7)\n1/0", "timeout": 5})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "FAILURE"
    assert body["outcome"] == "python_error"
    assert body["stdout"] == "42\n"
    assert body["error"]["type"] == "ZeroDivisionError"
    assert body["evidence"]["limits"]["timeout"] == 5
    assert {"files", "omitted", "elapsed_ms", "queued_ms"} <= set(body)


async def test_execute_in_a_session(client: httpx.AsyncClient) -> None:
    session_id = await open_session(client)
    await client.post("/v1/execute", json={"code": "x = 2", "sessionId": session_id})
    response = await client.post("/v1/execute", json={"code": "x ** 5", "sessionId": session_id})
    assert response.json()["result"] == {"text/plain": "32"}
    gone = await client.post("/v1/execute", json={"code": "1", "sessionId": "nope"})
    assert (gone.status_code, gone.text) == (404, "Session is not found: nope")
    invalid = await client.post("/v1/execute", json={"code": "1", "extra": True})
    assert invalid.status_code == 422


async def test_a_session_run_honours_its_timeout_capped_at_the_servers(
    client: httpx.AsyncClient,
) -> None:
    session_id = await open_session(client)
    await client.post("/v1/execute", json={"code": "x = 1", "sessionId": session_id})
    late = await client.post(
        "/v1/execute",
        json={"code": "import time\ntime.sleep(30)", "sessionId": session_id, "timeout": 1},
    )
    body = late.json()
    assert (body["outcome"], body["restarted"]) == ("timeout", True)
    assert body["evidence"]["limits"]["timeout"] == 1
    assert "1 s time limit" in body["stderr"]
    capped = await client.post(
        "/v1/execute", json={"code": "1", "sessionId": session_id, "timeout": 3600}
    )
    assert capped.json()["evidence"]["limits"]["timeout"] == 20  # the server's own (config)


async def test_execute_checks_roles(
    engine: Engine, gateway_config: Config, make_client: MakeClient
) -> None:
    app = create_app(engine, gateway_config.replace(create_code_app_roles=("coder",)))
    async with make_client(app, BOB) as bob:
        response = await bob.post("/v1/execute", json={"code": "1"})
    assert response.status_code == 403


async def test_health_metrics_openapi(gateway_app: FastAPI, client: httpx.AsyncClient) -> None:
    await client.post("/v1/execute", json={"code": "1"})
    health = await client.get("/health")
    assert health.json()["status"] == "HEALTHY"
    assert {"capacity", "running", "queued", "sessions", "pool_ready"} <= set(health.json())
    metrics = await client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    for name in (
        'corral_runs_total{outcome="ok"}',
        "corral_queue_length",
        "corral_busy_workers",
        "corral_sessions",
        'corral_execution_seconds_bucket{endpoint="execute"',
    ):
        assert name in metrics.text
    spec = (await client.get("/openapi.json")).json()
    ops = {p.rsplit("/", 1)[1] for p in spec["paths"] if p.startswith("/v1/ops/")}
    assert ops == {
        "open_session",
        "get_session",
        "close_session",
        "execute_code",
        "upload_file",
        "download_file",
        "list_files",
        "transfer_input_file",
        "transfer_output_file",
    }
    assert "/v1/execute" in spec["paths"]


async def test_two_apps_keep_separate_metrics(engine: Engine, gateway_config: Config) -> None:
    first = create_app(engine, gateway_config)
    second = create_app(engine, gateway_config)
    assert first.state.corral.metrics.registry is not second.state.corral.metrics.registry
