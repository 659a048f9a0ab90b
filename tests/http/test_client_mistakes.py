"""No 500 for a client's mistake: names too long, lone surrogates, and a property-based fuzz
of every route, which may answer anything but a 5xx (503 busy aside)."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import anyio.from_thread
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from corral.http._errors import BUSY_TEXT
from tests.http.httpkit import ALICE, KEYS, OPS, client_for, open_session, post, put_file

pytestmark = [pytest.mark.isolation]

LONG_NAME = "n" * 300  # past NAME_MAX (255 bytes)
LONG_PATH = "/".join(["d" * 200] * 25)  # 5,000 bytes: past PATH_MAX


@pytest.fixture
async def container(engine: Engine, container_config: Config) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_app(engine, container_config)) as client:
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


@pytest.fixture(scope="module")
def fuzz(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Any, dict[str, httpx.AsyncClient]]]:
    """A real engine, a gateway and a container app on an event loop of their own, for
    hypothesis's sync test function to call into."""
    with anyio.from_thread.start_blocking_portal() as portal:
        engine = Engine(capacity=2, limits=Limits(timeout=5))
        with portal.wrap_async_context_manager(engine), contextlib.ExitStack() as stack:
            clients = {}
            for mode in ("gateway", "container"):
                data_dir = tmp_path_factory.mktemp(f"fuzz-{mode}")
                config = Config(mode=mode, data_dir=data_dir, api_keys=KEYS, timeout=5)
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
