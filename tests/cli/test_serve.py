"""The README's first command: ``corral serve`` on embedded defaults answers DIAL requests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from corral.cli._serve import local_api_key

CORRAL = str(Path(sys.executable).with_name("corral"))


def test_local_api_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    key, created = local_api_key(tmp_path / "data")
    again, created_again = local_api_key(tmp_path / "data")
    assert (created, created_again) == (True, False)
    assert key == again
    assert key.startswith("corral-")
    assert len(key) > 30
    assert (tmp_path / "data" / "api-key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.isolation
@pytest.mark.network
def test_serve_on_embedded_defaults(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env["XDG_DATA_HOME"] = str(tmp_path)
    server = subprocess.Popen(
        [CORRAL, "serve", "--port", str(port)],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        said = []
        for line in server.stderr:  # ends when the server does: a hang fails the test timeout
            said.append(line)
            if f"Uvicorn running on http://127.0.0.1:{port}" in line:  # ready, not only bound
                break
        # stderr is no terminal here (a service's stderr is a log): the key stays in its file.
        key_file = tmp_path / "corral" / "api-key"
        key = key_file.read_text().strip()
        assert key.startswith("corral-")
        assert not any(key in line for line in said)
        assert any(str(key_file) in line for line in said)
        url = f"http://127.0.0.1:{port}/v1/ops/code_interpreter/execute_code"
        with httpx.Client(timeout=30) as client:
            denied = client.post(url, json={"code": "print(6 * 7)"})
            allowed = client.post(url, json={"code": "print(6 * 7)"}, headers={"Api-Key": key})
        assert denied.status_code == 401
        assert allowed.status_code == 200
        assert allowed.json() == {
            "status": "SUCCESS", "stdout": "42\n", "stderr": "", "result": "", "display": [],
        }  # fmt: skip
        assert (tmp_path / "corral" / "api-key").read_text().strip() == key
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()
