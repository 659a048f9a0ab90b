"""End to end over a real socket: ``serve_async`` on 127.0.0.1 (the real sandbox), a Quick
Apps-style flow."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import anyio
import httpx
import pytest

from corral._config import Config
from corral.http import serve_async
from tests.http.httpkit import ALICE, KEYS, OPS

pytestmark = [pytest.mark.anyio, pytest.mark.network, pytest.mark.isolation]


async def test_quick_apps_flow_over_loopback(tmp_path: Path) -> None:
    config = Config(
        mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, capacity=2, timeout=20
    )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    stop = anyio.Event()
    with listener, anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: serve_async(config, sockets=[listener], stop=stop))
            try:
                await _flow(f"http://127.0.0.1:{port}")
            finally:
                stop.set()
    # Keys and tenants' files: every folder the server made in its data folder is 0700.
    folders = [Path(root) for root, _, _ in os.walk(config.data_dir)]
    assert config.data_dir / "files" / "blobs" in folders
    assert len(folders) >= 4  # the data folder, files, blobs and at least one blob folder
    modes = {str(path): stat.S_IMODE(path.stat().st_mode) for path in folders}
    assert set(modes.values()) == {0o700}, modes


async def _flow(base_url: str) -> None:
    """What DIAL Quick Apps' interpreter tool does, with its headers and bodies."""
    async with httpx.AsyncClient(base_url=base_url, headers={"Api-Key": ALICE}, timeout=30) as c:
        bucket = (await c.get("/v1/bucket")).json()["bucket"]
        put = await c.put(
            f"/v1/files/{bucket}/report/data.csv",
            files={"file": ("data.csv", b"a\n1\n2\n", "text/csv")},
        )
        assert put.status_code == 200
        session_id = (await c.post(f"{OPS}/open_session", json={"sessionId": None})).json()[
            "sessionId"
        ]
        got = await c.post(f"{OPS}/get_session", json={"sessionId": session_id})
        assert got.json() == {"sessionId": session_id}
        executed = await c.post(
            f"{OPS}/execute_code",
            json={
                "sessionId": session_id,
                "code": "import pandas as pd\ndf = pd.read_csv('data.csv')\nint(df.a.sum())",
                "inputFiles": [
                    {"sourceUrl": f"files/{bucket}/report/data.csv", "targetPath": "data.csv"}
                ],
                "outputFiles": [],
            },
        )
        assert executed.json() == {
            "status": "SUCCESS",
            "stdout": "",
            "stderr": "",
            "result": {"text/plain": "3"},
            "display": [],
        }
        listed = await c.post(f"{OPS}/list_files", json={"sessionId": session_id})
        assert listed.json() == {"files": [{"path": "data.csv", "size": 6}]}
        uploaded = await c.post(
            f"{OPS}/upload_file",
            params={"session_id": session_id},
            files={"file": ("notes.txt", b"hello", "application/octet-stream")},
        )
        assert uploaded.json() == {"path": "notes.txt", "size": 5}
        await c.post(
            f"{OPS}/execute_code",
            json={
                "sessionId": session_id,
                "code": "open('out.txt','w').write(open('notes.txt').read().upper())",
            },
        )
        downloaded = await c.post(
            f"{OPS}/download_file", json={"sessionId": session_id, "path": "out.txt"}
        )
        assert (downloaded.content, downloaded.headers["content-length"]) == (b"HELLO", "5")
        out = await c.post(
            f"{OPS}/transfer_output_file",
            json={
                "sessionId": session_id,
                "sourcePath": "out.txt",
                "targetUrl": f"files/{bucket}/report/out.txt",
            },
        )
        assert out.json()["url"] == f"files/{bucket}/report/out.txt"
        assert (await c.get(f"/v1/files/{bucket}/report/out.txt")).content == b"HELLO"
        late = await c.post(
            "/v1/execute",
            json={"sessionId": session_id, "code": "import time; time.sleep(30)", "timeout": 1},
        )  # corral's own route: a session run keeps to the timeout it asks for
        assert (late.json()["outcome"], late.json()["evidence"]["limits"]["timeout"]) == (
            "timeout",
            1,
        )
        closed = await c.post(f"{OPS}/close_session", json={"sessionId": session_id})
        assert closed.json() == {"sessionId": session_id}
        gone = await c.post(f"{OPS}/get_session", json={"sessionId": session_id})
        assert (gone.status_code, gone.text) == (404, f"Session is not found: {session_id}")
