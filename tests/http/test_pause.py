"""corral's pause routes and DIAL sessions across a restart, on a real ``corral serve``."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from tests.http.serverkit import ALICE, CAROL, running_server

pytestmark = [pytest.mark.anyio, pytest.mark.isolation, pytest.mark.network]

OPEN = "/v1/ops/code_interpreter/open_session"
EXECUTE = "/v1/ops/code_interpreter/execute_code"
CLOSE = "/v1/ops/code_interpreter/close_session"
READ_STATE = "x, f(), math.pi, open('kept.txt').read()"
STATE = "import math\nx = 41\ndef f(): return x + 1\nopen('kept.txt', 'w').write('kept')"


async def test_pause_resume_snapshot_and_a_restart_keep_a_dial_session(tmp_path: Path) -> None:
    async with running_server(tmp_path, server_toml="shutdown_grace = 10.0") as server:
        async with server.client(ALICE) as alice, server.client(CAROL) as carol:
            sid = (await alice.post(OPEN, json={"sessionId": "work/one"})).json()["sessionId"]
            ran = await alice.post(EXECUTE, json={"sessionId": sid, "code": STATE})
            assert ran.json()["status"] == "SUCCESS", ran.text
            assert (await carol.post(f"/v1/sessions/{sid}/pause", json={})).status_code == 404
            bad = await alice.post(f"/v1/sessions/{sid}/pause", json={"mode": "memory"})
            assert (bad.status_code, bad.json()["error"]["field"]) == (422, "mode")
            paused = await alice.post(f"/v1/sessions/{sid}/pause", json={"mode": "full"})
            assert paused.status_code == 200, paused.text
            assert paused.json() | {"lost": {}} == {
                "sessionId": sid, "state": "paused", "mode": "full", "lost": {}
            }  # fmt: skip
            # Its next operation resumes it, with everything.
            again = await alice.post(EXECUTE, json={"sessionId": sid, "code": "f(), math.pi"})
            assert again.json()["result"]["text/plain"] == "(42, 3.141592653589793)"
            snap = await alice.post(f"/v1/sessions/{sid}/snapshot", json={"name": "base"})
            assert snap.status_code == 200
            snapshot_id = snap.json()["snapshotId"]
            assert snapshot_id.startswith("snap_")
            await _two_sessions_from_one_snapshot(alice, carol, snapshot_id)
            files_only = await alice.post(EXECUTE, json={"sessionId": sid, "code": "x = 99"})
            assert files_only.json()["status"] == "SUCCESS"
            resumed = await alice.post(f"/v1/sessions/{sid}/resume", json={})
            assert resumed.json()["state"] == "running"
            await alice.post(f"/v1/sessions/{sid}/pause", json={})  # frozen at the SIGTERM
        assert await anyio.to_thread.run_sync(server.stop) == 0
    async with running_server(tmp_path) as server, server.client(ALICE) as alice:
        code = "x, f(), open('kept.txt').read()"
        back = await alice.post(EXECUTE, json={"sessionId": sid, "code": code})
        assert back.json()["result"]["text/plain"] == "(99, 100, 'kept')", back.text
        async with server.client(CAROL) as carol:
            other = await carol.post(EXECUTE, json={"sessionId": sid, "code": "1"})
            assert other.status_code == 404


async def _two_sessions_from_one_snapshot(
    alice: httpx.AsyncClient, carol: httpx.AsyncClient, snapshot_id: str
) -> None:
    """Each session opened from the snapshot is its own copy; another key cannot name it."""
    copies = []
    for _ in range(2):
        opened = await alice.post(OPEN, json={"snapshot": snapshot_id})
        assert opened.status_code == 200, opened.text
        copies.append(opened.json()["sessionId"])
    first, second = copies
    back = await alice.post(EXECUTE, json={"sessionId": first, "code": READ_STATE})
    assert back.json()["result"]["text/plain"] == "(41, 42, 3.141592653589793, 'kept')", back.text
    changed = await alice.post(EXECUTE, json={"sessionId": first, "code": "x = 7"})
    assert changed.json()["status"] == "SUCCESS"
    other = await alice.post(EXECUTE, json={"sessionId": second, "code": "x"})
    assert other.json()["result"]["text/plain"] == "41"
    for sid in copies:
        assert (await alice.post(CLOSE, json={"sessionId": sid})).status_code == 200
    theirs = await carol.post(OPEN, json={"snapshot": snapshot_id})
    assert (theirs.status_code, theirs.text) == (404, f"Snapshot is not found: {snapshot_id}")
    unknown = await alice.post(OPEN, json={"snapshot": "snap_nothing"})
    assert unknown.status_code == 404
    empty = await alice.post(OPEN, json={"snapshot": ""})
    detail = empty.headers.get("Corral-Error-Detail", "")
    assert (empty.status_code, "snapshot" in detail) == (400, True), (empty.text, detail)
