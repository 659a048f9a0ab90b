"""Load: parallel sessions, an explicit busy answer under a flood, body limits, on the
sandbox's in-process twin (the flood's sleeping code played by stand-ins, on a mock clock)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.http import create_app
from tests.http.httpkit import ALICE, execute, open_session, post, text
from tests.http.twinkit import Script, on_mock_clock, sleeps

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]
SLEEP_HALF = "import time; time.sleep(0.5)"
SLEEP_FIFTH = "import time; time.sleep(0.2)"


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {SLEEP_HALF: sleeps(0.5), SLEEP_FIFTH: sleeps(0.2)}


async def test_twenty_sessions_in_parallel(gateway_app: FastAPI, make_client: MakeClient) -> None:
    results: dict[int, tuple[Any, ...]] = {}

    async def one(index: int) -> None:
        async with make_client(gateway_app, ALICE) as client:
            session_id = await open_session(client)
            await execute(client, f"x = {index}\nopen('mine.txt', 'w').write(str(x))", session_id)
            value = (await execute(client, "x * 10", session_id))["result"]
            listed = (await post(client, "list_files", {"sessionId": session_id})).json()
            data = await post(
                client, "download_file", {"sessionId": session_id, "path": "mine.txt"}
            )
            closed = await post(client, "close_session", {"sessionId": session_id})
            results[index] = (value, listed, data.content, closed.status_code)

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for index in range(20):
                tg.start_soon(one, index)
    for index in range(20):
        size = len(str(index))
        assert results[index] == (
            {"text/plain": str(index * 10)},
            {"files": [{"path": "mine.txt", "size": size}]},
            str(index).encode(),
            200,
        )


@on_mock_clock
async def test_flood_gets_an_explicit_busy_answer(
    engine_factory: Callable[..., Any], gateway_config: Config, make_client: MakeClient
) -> None:
    """One worker and one queue slot: the rest is refused at once with 503 and Retry-After."""
    async with engine_factory(capacity=1, queue_size=1) as engine:
        app = create_app(engine, gateway_config)
        answers: list[httpx.Response] = []
        async with make_client(app, ALICE) as client:
            session_id = await open_session(client)

            async def dial() -> None:
                answers.append(await post(client, "execute_code", {"code": SLEEP_HALF}))

            async def own() -> None:
                answers.append(await client.post("/v1/execute", json={"code": SLEEP_HALF}))

            async def in_session() -> None:
                body = {"sessionId": session_id, "code": SLEEP_FIFTH}
                answers.append(await post(client, "execute_code", body))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for index in range(24):
                        tg.start_soon((dial, own, in_session)[index % 3])
            statuses = sorted(r.status_code for r in answers)
            assert set(statuses) <= {200, 503}, statuses
            assert 200 in statuses
            assert 503 in statuses
            for response in answers:
                if response.status_code != 503:
                    continue
                assert response.headers["retry-after"] == "1"
                if response.url.path == "/v1/execute":
                    assert response.json()["outcome"] == "busy"
                else:
                    assert text(response) == (503, "Code interpreter is busy, retry later")
            # Nothing is left hanging: the engine serves again once the flood is over.
            after = await execute(client, "6 * 7")
            assert after["result"] == {"text/plain": "42"}
            metrics = (await client.get("/metrics")).text
            assert 'corral_runs_total{outcome="busy"}' in metrics


async def test_request_body_limits(
    engine: Any, gateway_config: Config, container_config: Config, make_client: MakeClient
) -> None:
    gateway = create_app(engine, gateway_config.replace(max_request_bytes=1000))
    container = create_app(engine, container_config.replace(max_request_bytes=1000))
    code = "x = '" + "a" * 2000 + "'"

    async def chunked() -> Any:
        yield b'{"code": "'
        for _ in range(10):
            yield b"a" * 200
        yield b'"}'

    async with make_client(gateway, ALICE) as client:
        declared = await post(client, "execute_code", {"code": code})
        assert text(declared) == (413, "Request body too large")
        streamed = await client.post(
            "/v1/ops/code_interpreter/execute_code",
            content=chunked(),
            headers={"content-type": "application/json"},
        )
        assert text(streamed) == (413, "Request body too large")
        assert (await execute(client, "1"))["status"] == "SUCCESS"
    async with make_client(container) as client:
        declared = await client.post("/execute_code", json={"code": code})
        assert (declared.status_code, declared.json()) == (
            413,
            {"detail": "Request body too large"},
        )
