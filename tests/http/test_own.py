"""corral's own endpoints: /v1/execute (the full result), /health, /metrics, /openapi.json,
on the sandbox's in-process twin (code that runs past its deadline played by a stand-in, on a
mock clock)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import ALICE, BOB, client_for, open_session
from tests.http.twinkit import Script, on_mock_clock, runs_until_stopped, sleeps

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]
SLEEP_30 = "import time\ntime.sleep(30)"
SPIN = "while True: pass"


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {SLEEP_30: sleeps(30), SPIN: runs_until_stopped()}


def _client(engine: Engine, config: Config) -> httpx.AsyncClient:
    return client_for(create_app(engine, config), ALICE)


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
    assert gone.status_code == 404
    assert gone.json() == {
        "error": {
            "type": "not_found",
            "message": "Session is not found: nope",
            "field": "sessionId",
        }
    }
    invalid = await client.post("/v1/execute", json={"code": "1", "extra": True})
    assert invalid.status_code == 422
    assert invalid.json()["error"]["field"] == "extra"


@on_mock_clock
async def test_a_session_run_honours_its_timeout_capped_at_the_servers(
    engine_factory: Callable[..., Any], gateway_config: Config
) -> None:
    async with engine_factory() as engine, _client(engine, gateway_config) as client:
        session_id = await open_session(client)
        await client.post("/v1/execute", json={"code": "x = 1", "sessionId": session_id})
        late = await client.post(
            "/v1/execute",
            json={"code": SLEEP_30, "sessionId": session_id, "timeout": 1},
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
    assert response.json()["error"]["type"] == "forbidden"


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


async def test_return_files_adds_each_files_bytes(client: httpx.AsyncClient) -> None:
    code = "open('a.txt', 'w').write('hello')\nopen('b.bin', 'wb').write(bytes(range(256)))"
    plain = (await client.post("/v1/execute", json={"code": code})).json()
    assert [set(f) for f in plain["files"]] == [{"path", "size", "sha256"}] * 2
    body = (await client.post("/v1/execute", json={"code": code, "return_files": True})).json()
    contents = {f["path"]: base64.b64decode(f["content_base64"]) for f in body["files"]}
    assert contents == {"a.txt": b"hello", "b.bin": bytes(range(256))}


async def test_return_files_stays_within_the_file_limits(client: httpx.AsyncClient) -> None:
    limits = Limits()
    big = limits.max_file_bytes // 2 + 1  # two of these are over the returned-bytes bound
    code = (
        f"for i in range({limits.max_files + 2}): open(f'f{{i:02}}.txt', 'w').write(str(i))\n"
        f"for name in ('big1.bin', 'big2.bin'): open(name, 'wb').write(b'x' * {big})"
    )
    body = (await client.post("/v1/execute", json={"code": code, "return_files": True})).json()
    files = {f["path"]: f for f in body["files"]}
    assert len(files) == limits.max_files
    assert sorted(files)[:2] == ["big1.bin", "big2.bin"]
    assert len(base64.b64decode(files["big1.bin"]["content_base64"])) == big
    assert files["big2.bin"]["content_base64"] is None
    assert files["big2.bin"]["size"] == big
    returned = sum(f["size"] for f in files.values() if f["content_base64"] is not None)
    assert returned <= limits.max_file_bytes


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"code": 5}, "code", "field 'code': Input should be a valid string"),
        ({"code": "1", "sessionId": 123}, "sessionId", "field 'sessionId': Input should be a"),
        ({"code": "1", "timeout": -1}, "timeout", "field 'timeout': Input should be greater"),
        ({"code": "1", "stream": "yes"}, "stream", "field 'stream': Input should be a valid"),
        ({"code": "1", "tiemout": 3}, "tiemout", "unknown field 'tiemout'"),
        ({}, "code", "missing field 'code'"),
    ],
)
async def test_every_invalid_field_is_named(
    client: httpx.AsyncClient, body: dict[str, object], field: str, message: str
) -> None:
    response = await client.post("/v1/execute", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["type"], error["field"]) == ("invalid_request", field)
    assert error["message"].startswith(message), error["message"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the body must be a JSON object"),
        (b"[1]", "the body must be a JSON object"),
        (b"{nope", "the body is not valid JSON"),
    ],
)
async def test_bodies_that_are_not_objects(
    client: httpx.AsyncClient, content: bytes, message: str
) -> None:
    response = await client.post("/v1/execute", content=content)
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith(message)
    assert "field" not in response.json()["error"]


async def test_json_without_a_content_type(client: httpx.AsyncClient) -> None:
    for headers in ({}, {"Content-Type": "text/plain"}):
        response = await client.post("/v1/execute", content=b'{"code": "6*7"}', headers=headers)
        assert response.json()["result"] == {"text/plain": "42"}


async def test_own_routes_answer_json_errors_for_auth(gateway_app: FastAPI) -> None:
    async with client_for(gateway_app) as anonymous:
        response = await anonymous.post("/v1/execute", json={"code": "1"})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthorized"


@on_mock_clock
async def test_session_timeout_is_honoured(
    engine_factory: Callable[..., Any], gateway_config: Config
) -> None:
    async with engine_factory() as engine, _client(engine, gateway_config) as client:
        session_id = await open_session(client)
        body = {"code": SPIN, "sessionId": session_id, "timeout": 0.5}
        result = (await client.post("/v1/execute", json=body)).json()
        assert result["outcome"] == "timeout"
        assert result["evidence"]["limits"]["timeout"] == 0.5


async def test_a_body_over_the_limit_is_a_json_413(client: httpx.AsyncClient) -> None:
    limit = Config().max_request_bytes
    response = await client.post("/v1/execute", content=b'{"code": "' + b"x" * limit + b'"}')
    assert response.status_code == 413
    assert response.json() == {"error": {"type": "too_large", "message": "Request body too large"}}


LINES = 200_000
MULTI_LINE = """\
class Report:
    def __repr__(self):
        return ('y' * (96 - len({end!r})) + {end!r}) * 200_000
Report()
"""
"""A 19.2 M-character repr of 200,000 lines."""


@pytest.mark.parametrize("end", ["\r\n", "\n"], ids=["crlf", "lf"])
async def test_a_huge_multi_line_repr_counts_exactly_what_was_cut(
    client: httpx.AsyncClient, end: str
) -> None:
    """``omitted.result`` counts characters of the result's text exactly. That text is
    IPython's display formatter's, as in DIAL: it joins a repr's lines with ``\\n``, so a line
    end of ``\\r\\n`` is one character shorter (200,000 in all) and the last one is dropped."""
    from IPython.core.formatters import PlainTextFormatter

    namespace: dict[str, object] = {}
    exec(MULTI_LINE.format(end=end).rsplit("\n", 2)[0], namespace)  # noqa: S102 - our own code
    obj = namespace["Report"]()  # type: ignore[operator]
    full = PlainTextFormatter()(obj)
    assert len(repr(obj)) == LINES * 96
    assert len(full) == len(repr(obj)) - (LINES if end == "\r\n" else 0) - 1
    response = await client.post("/v1/execute", json={"code": MULTI_LINE.format(end=end)})
    result = response.json()
    text, omitted = result["result"]["text/plain"], result["omitted"]["result"]
    marker = f"\n[... {omitted} characters omitted ...]\n"
    head, _, tail = text.partition(marker)
    assert full.startswith(head)
    assert full.endswith(tail)
    assert len(head) + omitted + len(tail) == len(full)
    assert len(text) <= Limits().output_chars
