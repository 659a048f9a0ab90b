"""``POST /v1/execute`` with ``"stream": true`` over a real server: NDJSON, live, bounded.

Liveness is proved by events, not by time: the code waits for a file the test uploads only
after it received the first line, so a response that arrived whole at the end could never
finish.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI

from corral._limits import Limits
from corral.engine._fit import marker
from tests.http.httpkit import ALICE, OPS
from tests.http.livekit import live

pytestmark = [pytest.mark.anyio, pytest.mark.network]

RUN_BOUND = 30.0  # seconds for any one streamed run here
TIMINGS = ("elapsed_ms", "queued_ms", "cpu_ms", "peak_rss_kb")


@pytest.fixture
async def http(gateway_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        live(gateway_app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers={"Api-Key": ALICE}, timeout=30) as client,
    ):
        yield client


async def _lines(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line:
            yield json.loads(line)


async def _stream(http: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    with anyio.fail_after(RUN_BOUND):
        async with http.stream("POST", "/v1/execute", json={**body, "stream": True}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-ndjson"
            return [line async for line in _lines(response)]


def _untimed(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in TIMINGS}


async def test_the_first_line_arrives_while_the_code_still_runs(http: httpx.AsyncClient) -> None:
    session_id = (await http.post(f"{OPS}/open_session", json={})).json()["sessionId"]
    code = (
        "import os, sys, time\n"
        "print('first')\n"
        "print('careful', file=sys.stderr)\n"
        "while not os.path.exists('go'):\n"
        "    time.sleep(0.01)\n"
        "print('second')\n"
        "6 * 7"
    )
    lines: list[dict[str, Any]] = []
    body = {"code": code, "sessionId": session_id, "stream": True}
    with anyio.fail_after(RUN_BOUND):
        async with http.stream("POST", "/v1/execute", json=body) as response:
            async for line in _lines(response):
                lines.append(line)
                if line == {"type": "stdout", "text": "first\n"}:
                    uploaded = await http.post(
                        f"{OPS}/upload_file",
                        params={"session_id": session_id},
                        files={"file": ("go", b"")},
                    )
                    assert uploaded.status_code == 200
    assert lines[0] == {"type": "stdout", "text": "first\n"}
    assert [line["type"] for line in lines].count("result") == 1
    assert lines[-1]["type"] == "result"
    result = lines[-1]["result"]
    assert (result["outcome"], result["result"]) == ("ok", {"text/plain": "42"})
    text = {
        kind: "".join(x["text"] for x in lines if x["type"] == kind)
        for kind in ("stdout", "stderr")
    }
    assert text == {"stdout": result["stdout"], "stderr": result["stderr"]}
    assert text["stdout"] == "first\nsecond\n"


async def test_one_shot_streams_output_display_then_the_same_result(
    http: httpx.AsyncClient,
) -> None:
    code = (
        "import matplotlib.pyplot as plt\n"
        "for i in range(3): print(i)\n"
        "plt.plot([1, 2, 3]); plt.show()\n"
        "open('f.txt', 'w').write('abc')\n"
        "'done'"
    )
    lines = await _stream(http, {"code": code, "return_files": True})
    kinds = [line["type"] for line in lines]
    assert kinds[-1] == "result"
    assert set(kinds[:-1]) == {"stdout", "display"}
    (display,) = [line["data"] for line in lines if line["type"] == "display"]
    assert display["image/png"].startswith("iVBORw0KGgo")
    streamed = lines[-1]["result"]
    assert "".join(x["text"] for x in lines if x["type"] == "stdout") == "0\n1\n2\n"
    assert streamed["display"] == [display]
    assert streamed["files"][0]["content_base64"] == "YWJj"
    plain = (await http.post("/v1/execute", json={"code": code, "return_files": True})).json()
    assert _untimed(streamed) == _untimed(plain)


async def test_streamed_output_keeps_the_ceilings_with_exact_omissions(
    http: httpx.AsyncClient,
) -> None:
    limit = Limits().output_chars
    total = 3 * limit + 1  # the printed characters, newline included
    lines = await _stream(http, {"code": f"print('a' * {3 * limit})"})
    streamed = "".join(x["text"] for x in lines if x["type"] == "stdout")
    result = lines[-1]["result"]
    assert streamed == "a" * limit  # the head, cut at the ceiling
    omitted = result["omitted"]["stdout"]
    assert len(result["stdout"]) == limit
    assert len(result["stdout"]) - len(marker(omitted)) + omitted == total  # exact omissions


async def test_errors_before_the_stream_are_plain_json(http: httpx.AsyncClient) -> None:
    gone = await http.post("/v1/execute", json={"code": "1", "sessionId": "nope", "stream": True})
    assert gone.status_code == 404
    assert gone.json()["error"]["field"] == "sessionId"
    invalid = await http.post("/v1/execute", json={"code": 1, "stream": True})
    assert invalid.status_code == 422


async def test_a_session_closed_under_its_stream_ends_with_an_error_line(
    http: httpx.AsyncClient,
) -> None:
    session_id = (await http.post(f"{OPS}/open_session", json={})).json()["sessionId"]
    code = "print('started', flush=True)\nwhile True: pass"
    body = {"code": code, "sessionId": session_id, "stream": True}
    lines: list[dict[str, Any]] = []
    with anyio.fail_after(RUN_BOUND):
        async with http.stream("POST", "/v1/execute", json=body) as response:
            async for line in _lines(response):
                lines.append(line)
                if line["type"] == "stdout":
                    await http.post(f"{OPS}/close_session", json={"sessionId": session_id})
    assert lines[-1] == {
        "type": "error",
        "error": {"type": "not_found", "message": f"Session is not found: {session_id}"},
    }
