"""E2B's routes on corral's app, in process: routing, Connect framing, guarantees of the file
API, refusals. The engine runs on the sandbox's in-process twin where the answer is the front
end's, on the real sandbox where it is the sandbox's (commands, shell escapes, links and
modes the code makes, the interpreter's runs); the SDK's own tests are in test_sdk.py."""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from corral._config import ApiKey, Config
from corral._limits import Limits
from corral.e2b import ENVD_VERSION, is_e2b_key, new_e2b_key
from corral.engine import Engine
from corral.http import create_app
from corral.sandbox import InProcessBackend
from tests.http.livekit import live

pytestmark = pytest.mark.anyio

KEY = "e2b_" + "ab" * 20
OTHER = "e2b_" + "cd" * 20
QUOTA = 1024 * 1024  # bytes of one sandbox's disk


def _engine(**options: Any) -> Engine:
    return Engine(capacity=2, limits=Limits(timeout=20), session_disk_bytes=QUOTA, **options)


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    """The real engine on the sandbox's in-process twin, one per test."""
    async with _engine(backend=InProcessBackend()) as started:
        yield started


@pytest.fixture(scope="module")
async def real_engine() -> AsyncIterator[Engine]:
    """The real engine on the real sandbox, for the module's tests that need it."""
    async with _engine() as started:
        yield started


KEYS = (ApiKey(key=KEY, user="alice"), ApiKey(key=OTHER, user="bob"))


def _client(engine: Engine, data_dir: Path) -> httpx.AsyncClient:
    app = create_app(engine, Config(mode="gateway", data_dir=data_dir, api_keys=KEYS))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://corral")


@pytest.fixture
async def client(engine: Engine, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(engine, tmp_path) as http:
        yield http


@pytest.fixture
async def real_client(real_engine: Engine, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(real_engine, tmp_path) as http:
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
        "trafficAccessToken", "domain",
    }  # fmt: skip
    assert created["trafficAccessToken"] != created["envdAccessToken"]
    assert created["domain"] == "corral"  # the host the request came to: get_host's domain
    assert created["envdVersion"] == ENVD_VERSION
    assert len(bytes.fromhex(created["sandboxID"])) == 16  # 128 random bits
    health = await client.get("/health", headers=_envd(created))
    assert health.status_code == 204


async def test_host_name_routing(real_client: httpx.AsyncClient) -> None:
    """Real: E2B's interpreter prepares each run in its worker's own process (its __main__,
    a helper module, its environment, /home/user), which the in-process twin shares."""
    client = real_client
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
    port = {**_envd(created), "E2b-Sandbox-Port": "8080"}
    refused = await client.get("/", headers=port)  # envd's token is not the traffic token
    assert refused.status_code == 403
    assert "e2b-traffic-access-token" in refused.json()["message"]
    token = {**port, "e2b-traffic-access-token": created["trafficAccessToken"]}
    twin = await client.get("/", headers=token)  # the twin has no namespace to reach into
    assert twin.status_code == 502
    assert "no network namespace" in twin.json()["message"]


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
    forked = await client.post(
        f"/sandboxes/{created['sandboxID']}/fork", headers={"X-API-Key": KEY}
    )
    assert forked.status_code == 400
    # The twin has no freezer, and this engine no folder to pause to: a clear refusal.
    paused = await client.post(
        f"/sandboxes/{created['sandboxID']}/pause", headers={"X-API-Key": KEY}
    )
    assert paused.status_code == 409
    assert "no folder to keep paused sessions" in paused.json()["message"]


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


async def test_shell_escapes_run_in_the_sandbox(real_client: httpx.AsyncClient) -> None:
    client = real_client
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


async def test_process_start_streams_connect_frames(real_client: httpx.AsyncClient) -> None:
    client = real_client
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


async def test_files_never_follow_links_planted_by_code(real_client: httpx.AsyncClient) -> None:
    client = real_client
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


HOST_PID_NS = os.readlink("/proc/self/ns/pid")
CHMOD_0 = f"""\
import os, socket
if os.readlink('/proc/self/ns/pid') == {HOST_PID_NS!r} or socket.gethostname() != 'corral':
    raise RuntimeError('refusing to run hostile code outside the corral sandbox')
os.makedirs('d/sub')
open('d/f.txt', 'w').write('x')
os.chmod('d', 0)
"""
"""Proves it runs in the sandbox, then makes folder ``d`` unreadable and unsearchable."""


_LIST_DIR = "/filesystem.Filesystem/ListDir"


async def test_a_folder_the_code_made_unreadable_is_403_or_404_on_every_route(
    real_client: httpx.AsyncClient,
) -> None:
    client = real_client
    created = await _create(client)
    ran = await client.post("/execute", json={"code": CHMOD_0}, headers=_envd(created, 49999))
    assert all(e["type"] != "error" for e in _events(ran)), ran.text
    rpc = {**_envd(created), "Content-Type": "application/json"}
    calls = {
        "ListDir": {"path": "d"},
        "Stat": {"path": "d/f.txt"},
        "Remove": {"path": "d"},
        "MakeDir": {"path": "d/new"},
        "Move": {"source": "d/f.txt", "destination": "g.txt"},
    }
    for method, message in calls.items():
        reply = await client.post(f"/filesystem.Filesystem/{method}", json=message, headers=rpc)
        assert (reply.status_code, reply.json()["code"]) == (403, "permission_denied"), method
    folder = await client.post("/filesystem.Filesystem/Stat", json={"path": "d"}, headers=rpc)
    assert folder.json()["entry"]["mode"] == 0  # the folder itself can still be looked at
    upload = await client.post(
        "/files", params={"path": "d/x"}, content=b"x",
        headers={**_envd(created), "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert upload.status_code == 403, upload.text
    form = await client.post(
        "/files", params={"path": "d/y"}, files={"file": ("y", b"y")}, headers=_envd(created)
    )
    assert form.status_code == 403, form.text
    download = await client.get("/files", params={"path": "d/f.txt"}, headers=_envd(created))
    assert download.status_code == 404, download.text
    # And the home folder itself, by a process the code leaves behind (the runner gives a
    # folder the run itself took away back before its report).
    later = "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0.1; chmod 0 \"$PWD\"'])"
    await client.post("/execute", json={"code": later}, headers=_envd(created, 49999))
    listing = {"path": "/home/user"}
    with anyio.fail_after(5):
        while (home := await client.post(_LIST_DIR, json=listing, headers=rpc)).is_success:  # noqa: ASYNC110
            await anyio.sleep(0.02)  # polled: the process chmods in its own time
    assert (home.status_code, home.json()["code"]) == (403, "permission_denied")


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


UNICODE_DIGITS = [b"\xb2", b"\xb3\xb9", "\u0663".encode(), b"1\xb2"]
"""'²', '³¹' (true for str.isdigit, refused by int) as raw header bytes, '٣' in UTF-8 (which
int would read as 3), and a digit followed by one."""


async def _status(url: str, head: bytes, body: bytes = b"") -> int:
    """The status of one request sent as these exact bytes (no client checks its headers)."""
    host, port = url.removeprefix("http://").split(":")
    with anyio.fail_after(30):
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(head + b"\r\n" + body)
            answer = b""
            while b"\r\n" not in answer:
                answer += await stream.receive()
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("digits", UNICODE_DIGITS, ids=["sup2", "sup3-sup1", "arabic-3", "1-sup2"])
async def test_unicode_digits_in_numeric_headers_answer_4xx(
    client: httpx.AsyncClient, engine: Engine, tmp_path: Path, digits: bytes
) -> None:
    app = create_app(engine, Config(mode="gateway", data_dir=tmp_path / "live", api_keys=KEYS))
    async with live(app) as url, httpx.AsyncClient(base_url=url) as over_http:
        created = await _create(over_http)
        envd = b"".join(
            f"{name}: {value}\r\n".encode() for name, value in _envd(created).items()
            if name != "E2b-Sandbox-Port"
        )  # fmt: skip
        start = _envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "true"]}})
        requests = {
            "port without a key": (
                b"GET /health HTTP/1.1\r\nHost: corral\r\nE2b-Sandbox-Id: x\r\n"
                b"E2b-Sandbox-Port: " + digits + b"\r\n", b""),
            "port of a sandbox": (
                b"GET /health HTTP/1.1\r\nHost: corral\r\n" + envd
                + b"E2b-Sandbox-Port: " + digits + b"\r\n", b""),
            "stream deadline": (
                b"POST /process.Process/Start HTTP/1.1\r\nHost: corral\r\n" + envd
                + b"Content-Type: application/connect+json\r\nConnect-Timeout-Ms: " + digits
                + b"\r\nContent-Length: " + str(len(start)).encode() + b"\r\n", start),
            "unary deadline": (
                b"POST /process.Process/List HTTP/1.1\r\nHost: corral\r\n" + envd
                + b"Content-Type: application/json\r\nConnect-Timeout-Ms: " + digits
                + b"\r\nContent-Length: 2\r\n", b"{}"),
            "upload length": (  # uvicorn (h11) refuses this one before the app sees it
                b"POST /files?path=x HTTP/1.1\r\nHost: corral\r\n" + envd
                + b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: " + digits
                + b"\r\n", b""),
        }  # fmt: skip
        statuses = {name: await _status(url, *sent) for name, sent in requests.items()}
        # Not an E2B host name: the request is corral's own, and answers as such.
        named = b"GET /health HTTP/1.1\r\nHost: " + digits + b"-" + created["sandboxID"].encode()
        statuses["host name port"] = await _status(url, named + b".e2b.example\r\n")
    assert all(400 <= status < 500 for name, status in statuses.items() if "host" not in name), (
        statuses
    )
    assert statuses["host name port"] == 200
    # A Content-Length that reaches the app (behind another server than uvicorn) is read as
    # ASCII digits too: envd's upload and the gateway's body limit.
    created = await _create(client)
    upload = await client.post(
        "/files", params={"path": "x"}, files={"file": ("x", b"x")},
        headers=[*((k.encode(), v.encode()) for k, v in _envd(created).items()),
                 (b"Content-Length", digits)],
    )  # fmt: skip
    assert upload.status_code == 200, upload.text
    own = await client.post("/v1/execute", headers={b"Content-Length": digits})
    assert own.status_code == 401, own.text


def test_e2b_keys_have_the_sdk_shape() -> None:
    key = new_e2b_key()
    assert is_e2b_key(key)
    assert len(key) == 4 + 40
    assert not is_e2b_key("corral-abc")
    assert new_e2b_key() != key
