"""``POST /v1/execute`` with ``"stream": true`` over a real server: NDJSON, live, bounded.

Liveness is proved by events, not by time: the code waits for a file the test uploads only
after it received the first line, so a response that arrived whole at the end could never
finish. The engine runs on the sandbox's in-process twin; code that waits or spins (which would
stop the twin's event loop) is played by a stand-in that does what it does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.engine._fit import STREAM_CUT, marker
from corral.http import create_app
from corral.sandbox import RunRequest, TwinIO, TwinReply
from tests.http.httpkit import ALICE, KEYS, OPS, TIMEOUT
from tests.http.livekit import live
from tests.http.twinkit import Script, runs_until_stopped

pytestmark = [pytest.mark.anyio, pytest.mark.network]

RUN_BOUND = 30.0  # seconds for any one streamed run here
TIMINGS = ("elapsed_ms", "queued_ms", "cpu_ms", "peak_rss_kb")
WAITS_FOR_GO = (
    "import os, sys, time\n"
    "print('first')\n"
    "print('careful', file=sys.stderr)\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.01)\n"
    "print('second')\n"
    "6 * 7"
)
SPINS = "print('started', flush=True)\nwhile True: pass"
_POLL = 0.01  # seconds between looks for the file, as WAITS_FOR_GO looks


async def _waits_for_go(request: RunRequest, io: TwinIO) -> TwinReply:
    """WAITS_FOR_GO, step by step."""
    await io.stdout("first\n")
    await io.stderr("careful\n")
    while not await anyio.Path(io.cwd, "go").exists():  # noqa: ASYNC110 - as the code polls
        await anyio.sleep(_POLL)
    await io.stdout("second\n")
    return TwinReply(result={"text/plain": "42"})


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {WAITS_FOR_GO: _waits_for_go, SPINS: runs_until_stopped("started\n")}


@pytest.fixture(scope="module")
async def http(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[httpx.AsyncClient]:
    data_dir = tmp_path_factory.mktemp("stream")
    config = Config(mode="gateway", data_dir=data_dir, api_keys=KEYS, timeout=TIMEOUT)
    async with (
        live(create_app(engine, config)) as base_url,
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
    lines: list[dict[str, Any]] = []
    body = {"code": WAITS_FOR_GO, "sessionId": session_id, "stream": True}
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
    assert streamed == "a" * limit + STREAM_CUT  # the head, cut at the ceiling, and says so
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
    body = {"code": SPINS, "sessionId": session_id, "stream": True}
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
