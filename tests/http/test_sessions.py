"""Gateway sessions per key: temporary sessions (execute_code with inputFiles/outputFiles and
no sessionId) count against ``max_sessions_per_key`` while they live; listings. On the
sandbox's in-process twin (the held run played by a stand-in)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from corral.http._sessions import TRUNCATED_HEADER
from tests.http.httpkit import ALICE, KEYS, client_for, open_session, post, put_file
from tests.http.twinkit import Script, runs_until_stopped

pytestmark = pytest.mark.anyio

HOLD = "import time\nwhile True:\n    time.sleep(0.01)"
"""Holds its temporary session until the run's deadline ends it."""
HELD_FOR = 3  # seconds: the run time limit that ends HOLD


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {HOLD: runs_until_stopped()}


async def test_temporary_sessions_count_against_the_per_key_limit(
    engine_factory: Callable[..., Any], tmp_path: Path
) -> None:
    config = Config(
        mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, timeout=HELD_FOR,
        max_sessions_per_key=2,
    )  # fmt: skip
    async with engine_factory(limits=Limits(timeout=HELD_FOR)) as engine:
        app = create_app(engine, config)
        async with client_for(app, ALICE) as client:
            bucket = (await client.get("/v1/bucket")).json()["bucket"]
            assert (await put_file(client, f"files/{bucket}/in.txt", b"hi")).status_code == 200
            with_files = {
                "sessionId": None,
                "inputFiles": [{"sourceUrl": f"files/{bucket}/in.txt", "targetPath": "in.txt"}],
            }
            first = await open_session(client)
            before = len(engine.sessions())
            results: list[int] = []

            async def temporary_run() -> None:
                response = await post(client, "execute_code", {**with_files, "code": HOLD})
                results.append(response.status_code)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(temporary_run)
                    while len(engine.sessions()) == before:  # noqa: ASYNC110 - nothing signals it
                        await anyio.sleep(0.01)
                    # One open session and one temporary: the limit of two is reached.
                    refused = await post(client, "open_session", {"sessionId": None})
                    assert refused.status_code == 429
                    assert "temporary session counts" in refused.text
                    third = await post(client, "execute_code", {**with_files, "code": "1"})
                    assert third.status_code == 429
            assert results == [200]  # the held run ended at its deadline, with an answer
            # The temporary session is gone: its place is free again.
            ran = await post(
                client, "execute_code", {**with_files, "code": "open('in.txt').read()"}
            )
            assert (ran.status_code, ran.json()["result"]) == (200, {"text/plain": "'hi'"})
            second = await open_session(client)
            for session_id in (first, second):
                await post(client, "close_session", {"sessionId": session_id})


async def test_a_listing_survives_names_that_are_not_utf8(
    client: httpx.AsyncClient,
) -> None:
    session_id = await open_session(client)
    code = "open(b'caf\\xe9.txt', 'wb').write(b'x')\nopen('ok.txt', 'w').write('y')"
    made = await post(client, "execute_code", {"sessionId": session_id, "code": code})
    assert made.json()["status"] == "SUCCESS", made.text
    listed = await post(client, "list_files", {"sessionId": session_id})
    assert listed.status_code == 200, listed.text
    assert listed.json() == {
        "files": [{"path": "caf\\xe9.txt", "size": 1}, {"path": "ok.txt", "size": 1}]
    }
    await post(client, "close_session", {"sessionId": session_id})


async def test_a_listing_cut_at_its_cap_says_so(engine: Engine, tmp_path: Path) -> None:
    config = Config(mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, list_max_entries=2)
    async with client_for(create_app(engine, config), ALICE) as client:
        session_id = await open_session(client)
        code = "for name in 'abc':\n    open(name, 'w').write(name)"
        await post(client, "execute_code", {"sessionId": session_id, "code": code})
        cut = await post(client, "list_files", {"sessionId": session_id})
        assert cut.status_code == 200
        assert len(cut.json()["files"]) == 2
        assert cut.headers[TRUNCATED_HEADER] == "true"
        await post(
            client, "execute_code", {"sessionId": session_id, "code": "import os\nos.remove('c')"}
        )
        whole = await post(client, "list_files", {"sessionId": session_id})
        assert [f["path"] for f in whole.json()["files"]] == ["a", "b"]
        assert TRUNCATED_HEADER not in whole.headers
        await post(client, "close_session", {"sessionId": session_id})
