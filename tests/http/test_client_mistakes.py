"""No 500 for a client's mistake: names too long, lone surrogates, and a property-based fuzz
of every route, which may answer anything but a 5xx (503 busy aside). On the sandbox's
in-process twin; folders the code made unreadable, on the real sandbox."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import anyio
import anyio.from_thread
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral._config import ApiKey, Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from corral.http._errors import BUSY_TEXT
from corral.sandbox import InProcessBackend
from tests.http.httpkit import (
    ALICE,
    KEYS,
    OPS,
    client_for,
    execute,
    open_session,
    post,
    put_file,
)

LONG_NAME = "n" * 300  # past NAME_MAX (255 bytes)
LONG_PATH = "/".join(["d" * 200] * 25)  # 5,000 bytes: past PATH_MAX


@pytest.fixture
async def container(engine: Engine, container_config: Config) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_app(engine, container_config)) as client:
        yield client


@pytest.fixture
async def real_container(
    real_engine: Engine, container_config: Config
) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_app(real_engine, container_config)) as client:
        yield client


@pytest.mark.anyio
@pytest.mark.parametrize("name", [LONG_NAME, LONG_PATH])
async def test_names_too_long_are_400_everywhere(
    client: httpx.AsyncClient, container: httpx.AsyncClient, name: str
) -> None:
    session_id = await open_session(client)
    upload = await post(
        client, "upload_file", params={"session_id": session_id},
        files={"file": (name, b"x", "application/octet-stream")},
    )  # fmt: skip
    assert upload.status_code == 400, upload.text
    if name == LONG_NAME:  # a 5,000-byte part header is refused earlier, as malformed
        assert upload.json()["detail"].startswith("Name too long")
    bucket = (await client.get("/v1/bucket")).json()["bucket"]
    assert (await put_file(client, f"files/{bucket}/in.txt", b"x")).status_code == 200
    transfer = await post(
        client, "execute_code",
        {"sessionId": session_id, "code": "1",
         "inputFiles": [{"sourceUrl": f"files/{bucket}/in.txt", "targetPath": name}]},
    )  # fmt: skip
    assert transfer.status_code == 400, transfer.text
    assert transfer.json()["detail"].startswith("Name too long")
    contained = await container.post(
        "/upload_file", files={"file": (name, b"x", "application/octet-stream")}
    )
    assert contained.status_code == 400, contained.text
    if name == LONG_NAME:
        assert contained.json()["detail"].startswith("Name too long")
    await post(client, "close_session", {"sessionId": session_id})


@pytest.mark.anyio
async def test_a_lone_surrogate_is_a_typed_refusal(client: httpx.AsyncClient) -> None:
    body = '{"code": "x = \'\\ud800\'\\nprint(x)"}'  # valid JSON, not valid Unicode
    response = await client.post(
        "/v1/execute", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["outcome"] == "invalid_input"
    assert "not valid Unicode" in result["message"]
    dial = await client.post(
        f"{OPS}/open_session", content='{"sessionId": "a\\udc00b"}',
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert dial.status_code == 400


# folders the code made unreadable ---------------------------------------------------------------

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
ROOT_0 = "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0.1; chmod 0 \"$PWD\"'])"
"""Leaves a process behind that makes the session folder itself unreadable once the run has
reported (the runner gives a folder the run itself took away back before its report)."""
DENIED = {"detail": "Permission denied: d/x"}


@pytest.mark.anyio
async def test_a_folder_the_code_made_unreadable_is_403_or_404_on_every_dial_route(
    real_client: httpx.AsyncClient,
) -> None:
    client = real_client
    session_id = await open_session(client)
    assert (await execute(client, CHMOD_0, session_id))["status"] == "SUCCESS"
    bucket = (await client.get("/v1/bucket")).json()["bucket"]
    assert (await put_file(client, f"files/{bucket}/in.txt", b"x")).status_code == 200
    params = {"session_id": session_id}
    upload = await post(client, "upload_file", params=params, files={"file": ("d/x", b"x")})
    assert (upload.status_code, upload.json()) == (403, DENIED)
    download = await post(client, "download_file", {"sessionId": session_id, "path": "d/f.txt"})
    assert (download.status_code, download.json()) == (404, {"detail": "File not found: d/f.txt"})
    listed = await post(client, "list_files", {"sessionId": session_id})
    assert (listed.status_code, listed.json()) == (200, {"files": []})
    source = {"sourceUrl": f"files/{bucket}/in.txt", "targetPath": "d/x"}
    transfer_in = await post(client, "transfer_input_file", {"sessionId": session_id, **source})
    assert (transfer_in.status_code, transfer_in.json()) == (403, DENIED)
    target = {"sourcePath": "d/f.txt", "targetUrl": f"files/{bucket}/out.txt"}
    transfer_out = await post(client, "transfer_output_file", {"sessionId": session_id, **target})
    assert transfer_out.status_code == 404, transfer_out.text
    run = {"sessionId": session_id, "code": "1"}
    with_input = await post(client, "execute_code", {**run, "inputFiles": [source]})
    assert (with_input.status_code, with_input.json()) == (403, DENIED)
    with_output = await post(client, "execute_code", {**run, "outputFiles": [target]})
    assert with_output.status_code == 404, with_output.text
    await execute(client, ROOT_0, session_id)
    with anyio.fail_after(5):
        while (root := await post(client, "list_files", {"sessionId": session_id})).is_success:  # noqa: ASYNC110
            await anyio.sleep(0.02)  # polled: the process chmods in its own time
    assert (root.status_code, root.json()) == (403, {"detail": "Permission denied: ."})
    upload = await post(client, "upload_file", params=params, files={"file": ("x", b"x")})
    assert (upload.status_code, upload.json()) == (403, {"detail": "Permission denied: x"})
    await post(client, "close_session", {"sessionId": session_id})


@pytest.mark.anyio
async def test_a_folder_the_code_made_unreadable_is_403_or_404_in_container_mode(
    real_container: httpx.AsyncClient,
) -> None:
    container = real_container
    ran = await container.post("/execute_code", json={"code": CHMOD_0})
    assert ran.json()["status"] == "SUCCESS", ran.text
    upload = await container.post("/upload_file", files={"file": ("d/x", b"x")})
    assert (upload.status_code, upload.json()) == (403, DENIED)
    download = await container.post("/download_file", json={"path": "d/f.txt"})
    assert (download.status_code, download.json()) == (404, {"detail": "File not found: d/f.txt"})
    listed = await container.post("/list_files", json={})
    assert (listed.status_code, listed.json()) == (200, {"files": []})
    assert (await container.post("/execute_code", json={"code": ROOT_0})).status_code == 200
    with anyio.fail_after(5):
        while (root := await container.post("/list_files", json={})).is_success:  # noqa: ASYNC110
            await anyio.sleep(0.02)  # polled: the process chmods in its own time
    assert (root.status_code, root.json()) == (403, {"detail": "Permission denied: ."})


# the fuzz ----------------------------------------------------------------------------------

_FIELDS = (
    "code", "sessionId", "path", "inputFiles", "outputFiles", "sourceUrl", "targetUrl",
    "targetPath", "sourcePath", "timeout", "stream", "comment",
)  # fmt: skip
_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),  # surrogates and controls too
    st.sampled_from([LONG_NAME, LONG_PATH, "..", "/", "files/x/y", "a\x00b", "\ud800"]),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_BODY = st.one_of(
    st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=5),
    _JSON,
    st.binary(max_size=64),
)


def _routes() -> list[tuple[str, str, str]]:
    """Every (mode, method, path) corral serves, from each mode's OpenAPI document."""
    found = []
    for mode in ("gateway", "container"):
        with tempfile.TemporaryDirectory() as data_dir:
            config = Config(mode=mode, data_dir=Path(data_dir), api_keys=KEYS)
            paths = create_app(cast(Any, _NoEngine()), config).openapi()["paths"]
        found += [(mode, m.upper(), path) for path, ops in paths.items() for m in ops]
    return sorted(found)


class _NoEngine:
    """Enough of an engine to build the app and list its routes; never asked to run."""

    def statistics(self) -> Any:
        raise AssertionError("not used")

    def sessions(self) -> list[Any]:
        return []  # none paused by an earlier server


E2B_KEY = "e2b_" + "5a" * 20
FUZZ_KEYS = (*KEYS, ApiKey(key=E2B_KEY, user="e2b-fuzz"))


@pytest.fixture(scope="module")
def fuzz(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Any, dict[str, httpx.AsyncClient]]]:
    """An engine on the sandbox's in-process twin, a gateway and a container app on an event
    loop of their own, for hypothesis's sync test function to call into."""
    with anyio.from_thread.start_blocking_portal() as portal:
        engine = Engine(capacity=2, limits=Limits(timeout=5), backend=InProcessBackend())
        with portal.wrap_async_context_manager(engine), contextlib.ExitStack() as stack:
            clients = {}
            for mode in ("gateway", "container"):
                data_dir = tmp_path_factory.mktemp(f"fuzz-{mode}")
                config = Config(mode=mode, data_dir=data_dir, api_keys=FUZZ_KEYS, timeout=5)
                app = portal.call(lambda: _app(engine, config))  # noqa: B023 - called at once
                client = client_for(app, ALICE)
                clients[mode] = stack.enter_context(portal.wrap_async_context_manager(client))
            yield portal, clients


async def _app(engine: Engine, config: Config) -> Any:
    return create_app(engine, config)


def _quoted(text: str) -> str:
    """Percent-encoded, surrogates included (as the invalid UTF-8 a client could send)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _fill(path: str, values: list[str]) -> str:
    for name in ("{bucket}", "{path:path}", "{path}"):
        if name in path:
            path = path.replace(name, values.pop() if values else "x")
    return path


@settings(
    max_examples=200, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
@given(
    route=st.sampled_from(_routes()),
    body=_BODY,
    params=st.lists(st.text(st.characters(exclude_categories=()), max_size=20), max_size=3),
    multipart=st.booleans(),
)
def test_no_route_answers_5xx(
    fuzz: tuple[Any, dict[str, httpx.AsyncClient]],
    route: tuple[str, str, str],
    body: Any,
    params: list[str],
    multipart: bool,
) -> None:
    portal, clients = fuzz
    mode, method, template = route
    client = clients[mode]
    url = _fill(template, [_quoted(p) or "x" for p in params])
    if isinstance(body, bytes):
        options: dict[str, Any] = {"content": body}
    elif multipart:
        name = str(body.get("path", "f.txt")) if isinstance(body, dict) else "f.txt"
        options = {"files": {"file": (name, b"data", "text/plain")}}
    else:
        options = {
            "content": json.dumps(body),  # ASCII, so a lone surrogate travels as \ud800
            "headers": {"Content-Type": "application/json"},
        }
    if method in ("GET", "DELETE"):
        options = {}
    if params:
        url += "?session_id=" + _quoted(params[0])

    async def send() -> httpx.Response:
        return await client.request(method, url, **options)

    response = portal.call(send)
    busy = response.status_code == 503 and BUSY_TEXT in response.text
    assert response.status_code < 500 or busy, (method, url, options, response.text)


_RAW_MISTAKES = [
    # Python's JSON reader takes NaN and Infinity; FastAPI's 422 echoes the input back.
    ("/v1/execute", '{"code": "1", "timeout": NaN}'),
    ("/v1/execute", '{"code": "1", "timeout": -Infinity}'),
    # An unknown session id is echoed in the 404: a lone surrogate there must not break it.
    ("/v1/execute", '{"code": "1", "sessionId": "\\udcff"}'),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("route", "body"), _RAW_MISTAKES)
async def test_echoed_mistakes_are_answered_not_500(
    client: httpx.AsyncClient, route: str, body: str
) -> None:
    response = await client.post(route, content=body, headers={"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    if response.headers["content-type"].startswith("application/json"):
        json.loads(response.text)  # strict JSON still: no NaN, no lone surrogate


# the header fuzz: every numeric or routing header, with values a client could send ----------------

_E2B_ROUTES = [
    ("GET", "/health"), ("GET", "/files?path=a.txt"), ("POST", "/files?path=a.txt"),
    ("POST", "/filesystem.Filesystem/Stat"), ("POST", "/filesystem.Filesystem/ListDir"),
    ("POST", "/process.Process/List"), ("POST", "/process.Process/Start"),
    ("POST", "/process.Process/StreamInput"), ("POST", "/execute"), ("GET", "/contexts"),
    ("POST", "/v2/sandboxes"), ("GET", "/v2/sandboxes"),
]  # fmt: skip
"""E2B's routes (outside the OpenAPI document): envd's, the interpreter's, the control plane's."""
_HEADER_NAMES = (
    "e2b-sandbox-port", "connect-timeout-ms", "content-length", "content-type",
    "content-encoding", "x-dial-session-id", "api-key", "authorization", "x-access-token",
    "x-api-key", "keepalive-ping-interval", "range", "host",
)  # fmt: skip
_DIGITS = st.sampled_from(
    ["0", "1", "49983", "49999", "65536", "-1", "+1", " 1", "1_000", "9" * 30, "", "0x10",
     "\u00b2", "\u00b3", "\u00b9", "1\u00b2", "\u0663", "\uff11", "\u0967\u0968"]
)  # fmt: skip
_HEADER_VALUE = st.one_of(
    _DIGITS.map(lambda text: text.encode("utf-8")),
    _DIGITS.map(lambda text: text.encode("latin-1", "ignore")),  # '²' as the one byte 0xb2
    st.binary(max_size=24).map(
        lambda raw: bytes(b for b in raw if b == 0x09 or 0x20 <= b != 0x7F)  # no CR, LF, NUL
    ),
)


@pytest.fixture(scope="module")
def sandbox(fuzz: tuple[Any, dict[str, httpx.AsyncClient]]) -> dict[str, str]:
    """One live E2B sandbox, so the fuzz reaches envd's and the interpreter's handlers."""
    portal, clients = fuzz

    async def create() -> dict[str, str]:
        reply = await clients["gateway"].post(
            "/v2/sandboxes", json={"templateID": "code-interpreter-v1"},
            headers={"X-API-Key": E2B_KEY},
        )  # fmt: skip
        assert reply.status_code == 201, reply.text
        created: dict[str, str] = reply.json()
        return created

    created = portal.call(create)
    return {"id": created["sandboxID"], "token": created["envdAccessToken"]}


def _e2b_answer_is_allowed(response: httpx.Response) -> bool:
    """E2B's protocol, not a failure: its proxy answers a sandbox it does not know, or a port
    it does not serve, with 502 (the SDK reads that as 'not running'), and Connect answers a
    feature envd does not offer (a compressed request) ``unimplemented``, which is 501."""
    if response.status_code not in (501, 502):
        return False
    answer = response.json()
    if response.status_code == 501:
        return bool(answer.get("code") == "unimplemented")
    message = str(answer.get("message", ""))
    return "was not found" in message or "port is not open" in message


@settings(
    max_examples=300, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
@given(
    route=st.one_of(
        st.sampled_from(_routes()).map(lambda r: (r[0], r[1], _fill(r[2], []))),
        st.sampled_from(_E2B_ROUTES).map(lambda r: ("gateway", *r)),
    ),
    headers=st.dictionaries(st.sampled_from(_HEADER_NAMES), _HEADER_VALUE, max_size=4),
    e2b=st.sampled_from(["none", "sandbox", "stranger"]),
    body=_BODY,
)
def test_no_header_answers_5xx(
    fuzz: tuple[Any, dict[str, httpx.AsyncClient]],
    sandbox: dict[str, str],
    route: tuple[str, str, str],
    headers: dict[str, bytes],
    e2b: str,
    body: Any,
) -> None:
    """Any value of any header the routes read (ports, deadlines, lengths, keys, tokens), with
    or without E2B's routing headers: never a 5xx (a busy 503 and E2B's 502 aside)."""
    portal, clients = fuzz
    mode, method, url = route
    sent = [(name.encode(), value) for name, value in headers.items()]
    if e2b != "none":
        sandbox_id = sandbox["id"] if e2b == "sandbox" else "0" * 32
        sent += [(b"e2b-sandbox-id", sandbox_id.encode()), (b"x-api-key", E2B_KEY.encode())]
        sent += [(b"x-access-token", sandbox["token"].encode())]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def send() -> httpx.Response:
        options: dict[str, Any] = {} if method in ("GET", "DELETE") else {"content": content}
        return await clients[mode].request(method, url, headers=sent, **options)

    response = portal.call(send)
    busy = response.status_code == 503 and BUSY_TEXT in response.text
    allowed = busy or (e2b != "none" and _e2b_answer_is_allowed(response))
    assert response.status_code < 500 or allowed, (method, url, sent, response.text)
