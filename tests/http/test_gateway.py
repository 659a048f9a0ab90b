"""Gateway mode: DIAL Core's session operations, auth, roles and strict bodies (docs/dial.md
§5), on the sandbox's in-process twin; what the sandbox itself shows (its folder) on the real
one."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.errors import ConfigError
from corral.http import create_app
from tests.http.httpkit import ALICE, APP, BOB, open_session, post, text
from tests.http.twinkit import Script, runs_until_stopped

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]
LONG_RUN = "import time\nfor _ in range(600): time.sleep(0.05)"


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {LONG_RUN: runs_until_stopped()}


async def test_authentication(gateway_app: FastAPI, make_client: MakeClient) -> None:
    async with make_client(gateway_app) as anonymous:
        for op in ("open_session", "get_session", "execute_code", "upload_file"):
            assert text(await post(anonymous, op, {})) == (401, "Unauthorized")
        wrong = await post(anonymous, "open_session", {}, headers={"Api-Key": "nope"})
        assert wrong.status_code == 401
        bearer = await post(
            anonymous, "open_session", {}, headers={"Authorization": f"Bearer {ALICE}"}
        )
        assert bearer.status_code == 200
        assert (await anonymous.get("/v1/bucket")).status_code == 401
        assert (await anonymous.post("/v1/execute", json={"code": "1"})).status_code == 401


async def test_gateway_needs_a_key(engine: Engine, gateway_config: Config) -> None:
    with pytest.raises(ConfigError, match="CORRAL_API_KEYS"):
        create_app(engine, gateway_config.replace(api_keys=()))


async def test_session_lifecycle(client: httpx.AsyncClient) -> None:
    generated = await open_session(client)
    assert len(generated) == 32
    assert int(generated, 16) >= 0
    chosen = await open_session(client, "my/session id")
    assert chosen == "my/session id"
    for session_id in (generated, chosen):
        got = await post(client, "get_session", {"sessionId": session_id})
        assert got.content == b'{"sessionId":"%s"}' % session_id.encode()
    again = await post(client, "open_session", {"sessionId": chosen})
    assert text(again) == (400, f"Session already exists: {chosen}")
    closed = await post(client, "close_session", {"sessionId": chosen})
    assert closed.json() == {"sessionId": chosen}
    for op in ("get_session", "close_session", "list_files"):
        gone = await post(client, op, {"sessionId": chosen})
        assert text(gone) == (404, f"Session is not found: {chosen}")
        assert gone.headers["content-type"] == "text/plain; charset=utf-8"
    assert await open_session(client, chosen) == chosen  # the id is free again


@pytest.mark.parametrize(
    "session_id", ["", "a/", "/a", "a//b", "a{b}", "a\tb", "..", "a/./b", "x%2Fy"]
)
async def test_invalid_session_ids(client: httpx.AsyncClient, session_id: str) -> None:
    opened = await post(client, "open_session", {"sessionId": session_id})
    assert text(opened) == (400, f"Invalid sessionId: {session_id}")
    looked_up = await post(client, "get_session", {"sessionId": session_id})
    assert text(looked_up) == (400, f"Invalid sessionId: {session_id}")


async def test_sessions_belong_to_their_key(gateway_app: FastAPI, make_client: MakeClient) -> None:
    async with make_client(gateway_app, ALICE) as alice, make_client(gateway_app, APP) as other:
        session_id = await open_session(alice, "shared-name")
        await post(alice, "execute_code", {"sessionId": session_id, "code": "x = 'alice'"})
        for op, body in [
            ("get_session", {"sessionId": session_id}),
            ("close_session", {"sessionId": session_id}),
            ("list_files", {"sessionId": session_id}),
            ("execute_code", {"sessionId": session_id, "code": "x"}),
            ("download_file", {"sessionId": session_id, "path": "a"}),
        ]:
            response = await post(other, op, body)
            assert text(response) == (404, f"Session is not found: {session_id}")
        assert await open_session(other, "shared-name") == "shared-name"
        await post(other, "execute_code", {"sessionId": session_id, "code": "x = 'other'"})
        mine = await post(alice, "execute_code", {"sessionId": session_id, "code": "x"})
        assert mine.json()["result"] == {"text/plain": "'alice'"}


async def test_create_code_app_roles(
    engine: Engine, gateway_config: Config, make_client: MakeClient
) -> None:
    denied = "User doesn't have sufficient permissions to run code interpreter"
    cases: list[tuple[tuple[str, ...] | None, dict[str, int]]] = [
        (None, {ALICE: 200, BOB: 200, APP: 200}),
        ((), {ALICE: 403, BOB: 403, APP: 200}),
        (("coder",), {ALICE: 200, BOB: 403, APP: 200}),
    ]
    for roles, expected in cases:
        app = create_app(engine, gateway_config.replace(create_code_app_roles=roles))
        for key, status in expected.items():
            async with make_client(app, key) as client:
                # Role check comes before the body is read: an invalid body still gets 403.
                opened = await post(client, "open_session", content=b"{not json")
                ran = await post(client, "execute_code", content=b"[]")
                if status == 403:
                    assert text(opened) == (403, denied)
                    assert text(ran) == (403, denied)
                else:
                    assert text(opened) == text(ran) == (400, "Not valid JSON body")
                    assert ran.headers["Corral-Error-Detail"] == "the body must be a JSON object"
                    assert (await post(client, "execute_code", {"code": "1"})).status_code == 200


@pytest.mark.parametrize(
    "content",
    [b"", b"null", b"[]", b"3", b"{nope", b'{"sessionId": 5}', b'{"sessionId": null, "extra": 1}'],
)
async def test_strict_json_bodies(client: httpx.AsyncClient, content: bytes) -> None:
    """DIAL's exact text, byte for byte; what was wrong is in a header of corral's own."""
    for op in ("open_session", "get_session", "close_session", "list_files", "execute_code"):
        response = await post(client, op, content=content)
        assert (response.status_code, response.content) == (400, b"Not valid JSON body")
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.headers["Corral-Error-Detail"], response.headers


async def test_missing_fields(client: httpx.AsyncClient) -> None:
    for op in ("get_session", "close_session", "list_files", "download_file"):
        assert text(await post(client, op, {})) == (400, "Missing sessionId")
        assert text(await post(client, op, {"sessionId": None})) == (400, "Missing sessionId")
    assert text(await post(client, "execute_code", {"sessionId": None})) == (400, "Missing code")
    missing_path = await post(client, "download_file", {"sessionId": "s"})
    assert text(missing_path) == (400, "Bad file path:null")


async def test_execute_returns_exactly_the_five_fields(client: httpx.AsyncClient) -> None:
    response = await post(
        client,
        "execute_code",
        {"sessionId": None, "code": "print('hi')\n1+2", "inputFiles": [], "outputFiles": []},
    )
    assert response.content == (
        b'{"status":"SUCCESS","stdout":"hi\\n","stderr":"","result":{"text/plain":"3"},"display":[]}'
    )
    failed = await post(client, "execute_code", {"code": "1/0"})
    assert failed.status_code == 200
    assert failed.json()["status"] == "FAILURE"
    assert failed.json()["stderr"].rstrip().endswith("ZeroDivisionError: division by zero")


async def test_temporary_sessions_share_nothing(client: httpx.AsyncClient) -> None:
    assert (await post(client, "execute_code", {"code": "x = 1"})).json()["status"] == "SUCCESS"
    second = (await post(client, "execute_code", {"code": "x"})).json()
    assert second["status"] == "FAILURE"
    assert "NameError" in second["stderr"]


async def test_state_persists_in_a_session(real_client: httpx.AsyncClient) -> None:
    client = real_client
    session_id = await open_session(client)
    await post(client, "execute_code", {"sessionId": session_id, "code": "x = 5"})
    second = await post(client, "execute_code", {"sessionId": session_id, "code": "x * 2"})
    assert second.json()["result"] == {"text/plain": "10"}
    here = await post(
        client, "execute_code", {"sessionId": session_id, "code": "import os; os.getcwd()"}
    )
    assert here.json()["result"] == {"text/plain": "'/mnt/data'"}


async def test_per_key_session_limit(
    engine: Engine, gateway_config: Config, make_client: MakeClient
) -> None:
    app = create_app(engine, gateway_config.replace(max_sessions_per_key=2))
    async with make_client(app, ALICE) as alice, make_client(app, BOB) as bob:
        first = await open_session(alice)
        await open_session(alice)
        third = await post(alice, "open_session", {})
        assert third.status_code == 429
        assert third.text.startswith("Too many open sessions for this API key (limit 2)")
        await open_session(bob)  # other keys are not affected
        await post(alice, "close_session", {"sessionId": first})
        await open_session(alice)


async def test_close_cancels_a_running_execution(client: httpx.AsyncClient) -> None:
    import anyio

    session_id = await open_session(client)
    answers: list[httpx.Response] = []

    async def run() -> None:
        body = {"sessionId": session_id, "code": LONG_RUN}
        answers.append(await post(client, "execute_code", body))

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            # Wait until the run holds a worker, then close the session under it.
            while True:
                stats = await client.get("/health")
                if stats.json()["running"] + stats.json()["session_runs"] >= 1:
                    break
                await anyio.sleep(0.01)
            closed = await post(client, "close_session", {"sessionId": session_id})
            assert closed.status_code == 200
    assert text(answers[0]) == (404, f"Session is not found: {session_id}")
