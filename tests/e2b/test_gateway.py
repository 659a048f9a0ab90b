"""E2B's routes on corral's app, in process: routing, Connect framing, guarantees of the file
API, refusals. The real engine runs the sandboxes; the SDK's own tests are in test_sdk.py."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral._config import ApiKey, Config
from corral._limits import Limits
from corral.e2b import ENVD_VERSION, is_e2b_key, new_e2b_key
from corral.engine import Engine
from corral.http import create_app

pytestmark = [pytest.mark.isolation, pytest.mark.anyio]

KEY = "e2b_" + "ab" * 20
OTHER = "e2b_" + "cd" * 20
QUOTA = 1024 * 1024  # bytes of one sandbox's disk


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=Limits(timeout=20), session_disk_bytes=QUOTA) as started:
        yield started


@pytest.fixture
async def client(engine: Engine, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    keys = (ApiKey(key=KEY, user="alice"), ApiKey(key=OTHER, user="bob"))
    app = create_app(engine, Config(mode="gateway", data_dir=tmp_path, api_keys=keys))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://corral") as http:
        yield http


async def _create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    reply = await client.post(
        "/v2/sandboxes",
        json={"templateID": "code-interpreter-v1", **body},
        headers={"X-API-Key": KEY},
    )
    assert reply.status_code == 201, reply.text
    created: dict[str, Any] = reply.json()
    return created


def _envd(sandbox: dict[str, Any], port: int = 49983) -> dict[str, str]:
    return {
        "E2b-Sandbox-Id": sandbox["sandboxID"],
        "E2b-Sandbox-Port": str(port),
        "X-Access-Token": sandbox["envdAccessToken"],
    }


def _events(reply: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in reply.text.splitlines()]


async def test_requests_without_e2b_headers_reach_corral_unchanged(
    client: httpx.AsyncClient,
) -> None:
    reply = await client.get("/health")
    assert reply.status_code == 200
    assert reply.json()["status"] == "HEALTHY"
    assert (await client.post("/v1/execute", json={"code": "1"})).status_code == 401


async def test_created_sandbox_answers_e2b_shape(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    assert set(created) == {
        "templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken",
    }  # fmt: skip
    assert created["envdVersion"] == ENVD_VERSION
    assert len(bytes.fromhex(created["sandboxID"])) == 16  # 128 random bits
    health = await client.get("/health", headers=_envd(created))
    assert health.status_code == 204


async def test_host_name_routing(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    headers = {
        "Host": f"49999-{created['sandboxID']}.e2b.example",
        "X-Access-Token": created["envdAccessToken"],
    }
    reply = await client.post("/execute", json={"code": "6 * 7"}, headers=headers)
    events = _events(reply)
    assert events[0] == {"type": "result", "is_main_result": True, "text": "42"}
    assert events[-2:] == [
        {"type": "number_of_executions", "execution_count": 1},
        {"type": "end_of_execution"},
    ]


async def test_missing_sandbox_and_closed_port(client: httpx.AsyncClient) -> None:
    gone = {"E2b-Sandbox-Id": "0" * 32, "E2b-Sandbox-Port": "49983"}
    reply = await client.get("/health", headers=gone)
    assert reply.status_code == 502
    assert "was not found" in reply.json()["message"]  # the SDK: not running
    created = await _create(client)
    closed = await client.get("/", headers={**_envd(created), "E2b-Sandbox-Port": "8080"})
    assert closed.status_code == 502
    assert "port is not open" in closed.json()["message"]


async def test_control_plane_refusals(client: httpx.AsyncClient) -> None:
    no_key = await client.post("/v2/sandboxes", json={"templateID": "base"})
    assert (no_key.status_code, set(no_key.json())) == (401, {"code", "message"})
    bad = await client.post(
        "/v2/sandboxes",
        json={"templateID": "base", "timeout": -1},
        headers={"X-API-Key": KEY},
    )
    assert bad.status_code == 400
    assert bad.json()["code"] == 400
    template = await client.post(
        "/sandboxes", json={"templateID": "desktop"}, headers={"X-API-Key": KEY}
    )
    assert template.status_code == 404
    created = await _create(client)
    theirs = await client.get(f"/sandboxes/{created['sandboxID']}", headers={"X-API-Key": OTHER})
    assert theirs.status_code == 404
    paused = await client.post(
        f"/sandboxes/{created['sandboxID']}/pause", headers={"X-API-Key": KEY}
    )
    assert paused.status_code == 400


async def test_execute_checks(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    headers = _envd(created, 49999)
    both = await client.post(
        "/execute", json={"code": "1", "context_id": "default", "language": "python"},
        headers=headers,
    )  # fmt: skip
    assert both.status_code == 400
    unknown = await client.post(
        "/execute", json={"code": "1", "context_id": "nope"}, headers=headers
    )
    assert unknown.status_code == 404
    other_language = await client.post(
        "/execute", json={"code": "1", "language": "r"}, headers=headers
    )
    assert other_language.status_code == 400
    # The SDK sends no token on /contexts: the unguessable sandbox id is enough.
    contexts = await client.get(
        "/contexts",
        headers={"E2b-Sandbox-Id": created["sandboxID"], "E2b-Sandbox-Port": "49999"},
    )
    assert contexts.json() == [{"id": "default", "language": "python", "cwd": "/home/user"}]


async def test_shell_escapes_run_in_the_sandbox(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    code = "!echo from-the-shell\nfiles = !ls /proc\nlen([f for f in files if f.isdigit()]) < 10"
    reply = await client.post("/execute", json={"code": code}, headers=_envd(created, 49999))
    events = _events(reply)
    assert events[0]["type"] == "stdout"
    assert events[0]["text"] == "from-the-shell\n"
    assert {"type": "result", "is_main_result": True, "text": "True"} in events


def _frames(body: bytes) -> list[tuple[int, Any]]:
    frames = []
    while body:
        flags, size = struct.unpack(">BI", body[:5])
        frames.append((flags, json.loads(body[5 : 5 + size])))
        body = body[5 + size :]
    return frames


async def test_process_start_streams_connect_frames(client: httpx.AsyncClient) -> None:
    created = await _create(client, envVars={"WHO": "sandbox"})
    message = json.dumps(
        {"process": {"cmd": "/bin/bash", "args": ["-c", "echo $WHO; exit 4"]}}
    ).encode()
    reply = await client.post(
        "/process.Process/Start",
        content=struct.pack(">BI", 0, len(message)) + message,
        headers={**_envd(created), "Content-Type": "application/connect+json"},
    )
    assert reply.headers["content-type"] == "application/connect+json"
    frames = _frames(reply.content)
    assert frames[0][1]["event"]["start"]["pid"] > 1
    output = b"".join(
        base64.b64decode(f[1]["event"]["data"]["stdout"])
        for f in frames
        if "data" in f[1].get("event", {})
    )
    assert output == b"sandbox\n"
    assert frames[-2][1] == {
        "event": {"end": {"exitCode": 4, "exited": True, "status": "exit status 4"}}
    }
    assert frames[-1] == (2, {})


def _envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


async def test_stream_input_and_connect_refuse_what_they_cannot_serve(
    client: httpx.AsyncClient,
) -> None:
    created = await _create(client)
    headers = {**_envd(created), "Content-Type": "application/connect+json"}
    answers = {}
    bodies = {
        "unknown pid": _envelope({"start": {"process": {"pid": 4242}}}),
        "no start": _envelope({"data": {"input": {"stdin": "eA=="}}}),
        "cut short": _envelope({"start": {"process": {"pid": 4242}}})[:-3],
        "too large": struct.pack(">BI", 0, 64 * 1024 * 1024),
        "not an object": struct.pack(">BI", 0, 2) + b"[]",
    }
    for name, body in bodies.items():
        reply = await client.post("/process.Process/StreamInput", content=body, headers=headers)
        assert reply.status_code == 200  # a stream's error travels in its end envelope
        [(flags, end)] = _frames(reply.content)
        answers[name] = (flags, end["error"]["code"])
    assert answers == {
        "unknown pid": (2, "not_found"),
        "no start": (2, "invalid_argument"),
        "cut short": (2, "invalid_argument"),
        "too large": (2, "resource_exhausted"),
        "not an object": (2, "invalid_argument"),
    }
    connect = await client.post(
        "/process.Process/Connect",
        content=_envelope({"process": {"pid": 4242}}),
        headers=headers,
    )
    assert (connect.status_code, connect.json()["code"]) == (404, "not_found")


async def test_files_never_follow_links_planted_by_code(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    planted = await client.post(
        "/execute",
        json={"code": "import os\nos.symlink('/etc/hostname', 'link')\nos.mkdir('d')"},
        headers=_envd(created, 49999),
    )
    assert all(e["type"] != "error" for e in _events(planted)), planted.text
    read = await client.get("/files", params={"path": "link"}, headers=_envd(created))
    assert read.status_code in (400, 404)
    rpc = {**_envd(created), "Content-Type": "application/json"}
    listed = await client.post(
        "/filesystem.Filesystem/ListDir", json={"path": "/home/user"}, headers=rpc
    )
    kinds = {e["name"]: (e["type"], e.get("isSymlink")) for e in listed.json()["entries"]}
    assert kinds == {"link": ("FILE_TYPE_SYMLINK", True), "d": ("FILE_TYPE_DIRECTORY", None)}
    through = await client.post(
        "/files", params={"path": "link/x"}, content=b"x",
        headers={**_envd(created), "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert through.status_code == 400
    outside = await client.post(
        "/filesystem.Filesystem/Stat", json={"path": "/etc/passwd"}, headers=rpc
    )
    assert outside.status_code == 403
    assert outside.json()["code"] == "permission_denied"


async def test_upload_over_the_quota_leaves_nothing(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    big = b"x" * (QUOTA + 1)
    octet = await client.post(
        "/files", params={"path": "big.bin"}, content=big,
        headers={**_envd(created), "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert octet.status_code == 507
    form = await client.post(
        "/files", params={"path": "big2.bin"}, files={"file": ("big2.bin", big)},
        headers=_envd(created),
    )  # fmt: skip
    assert form.status_code == 507
    rpc = {**_envd(created), "Content-Type": "application/json"}
    listed = await client.post(
        "/filesystem.Filesystem/ListDir", json={"path": "/home/user"}, headers=rpc
    )
    assert listed.json() == {"entries": []}


def test_e2b_keys_have_the_sdk_shape() -> None:
    key = new_e2b_key()
    assert is_e2b_key(key)
    assert len(key) == 4 + 40
    assert not is_e2b_key("corral-abc")
    assert new_e2b_key() != key
