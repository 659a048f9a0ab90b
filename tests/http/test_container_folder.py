"""Container mode keeps its files in MOUNT_FOLDER on the host, as DIAL's container does: a real
``corral serve --mode container`` over real HTTP, with a real host folder (issue 10 #7)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral._config import Config
from corral._uids import DEFAULT_UID_RANGE
from corral.cli._serve import container_warning

CORRAL = str(Path(sys.executable).with_name("corral"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def mount_folder() -> Iterator[Path]:
    # Not under /tmp: the sandbox's /tmp is its own, so a folder there could not appear at its
    # host path inside; /var/tmp can.
    folder = Path(tempfile.mkdtemp(prefix="corral-mount-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def container(folder: Path, data: Path) -> Iterator[httpx.Client]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env.update(MOUNT_FOLDER=str(folder), XDG_DATA_HOME=str(data))
    server = subprocess.Popen(
        [CORRAL, "serve", "--mode", "container", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    listening = threading.Event()

    def drain() -> None:  # the log must not fill the pipe and block the server
        assert server.stderr is not None
        for line in server.stderr:
            if "serving the container API" in line:
                listening.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert listening.wait(timeout=120), "the server did not start listening"
        # The socket is bound before the engine starts; /health answers once it has.
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            assert client.get("/health").json() == {"status": "HEALTHY"}
            yield client
    finally:
        server.terminate()
        server.wait(timeout=60)
        reader.join(timeout=60)
        if server.stderr is not None:
            server.stderr.close()


def run(client: httpx.Client, code: str) -> dict[str, object]:
    response = client.post("/execute_code", json={"code": code})
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


@pytest.mark.isolation
@pytest.mark.network
def test_files_live_in_the_host_folder_and_outlive_a_restart(
    mount_folder: Path, tmp_path: Path
) -> None:
    (mount_folder / "sidecar.txt").write_text("from a sidecar")
    with container(mount_folder, tmp_path) as client:
        uploaded = client.post(
            "/upload_file", files={"file": (f"{mount_folder}/in/data.csv", b"a,b\n1,2\n")}
        )
        assert uploaded.json() == {"path": "in/data.csv", "size": 8}
        assert (mount_folder / "in" / "data.csv").read_bytes() == b"a,b\n1,2\n"  # on the host
        seen = run(
            client,
            "import os\n"
            "print(os.getcwd())\n"
            "print(open('sidecar.txt').read())\n"
            "print(open('in/data.csv').read().split()[1])\n"
            "open('made.txt', 'w').write('by the code')\n"
            "os.symlink('/etc/passwd', 'planted')",
        )
        assert seen["stdout"] == f"{mount_folder}\nfrom a sidecar\n1,2\n", seen
        assert (mount_folder / "made.txt").read_text() == "by the code"
        owner = (mount_folder / "made.txt").stat().st_uid
        assert DEFAULT_UID_RANGE.first <= owner < DEFAULT_UID_RANGE.first + DEFAULT_UID_RANGE.count
        assert (mount_folder / "in" / "data.csv").stat().st_uid == owner  # the session's uid
        # The server never follows a link the code planted, though the host has the target.
        planted = client.post("/download_file", json={"path": "planted"})
        assert planted.status_code == 404
        (mount_folder / "later.txt").write_text("written while serving")
        assert run(client, "print(open('later.txt').read())")["stdout"] == (
            "written while serving\n"
        )
    with container(mount_folder, tmp_path) as client:  # a restart: same folder, same files
        listed = client.post("/list_files", json={}).json()["files"]
        assert {"path": "made.txt", "size": 11} in listed
        assert {"path": "in/data.csv", "size": 8} in listed
        assert client.post("/download_file", json={"path": "made.txt"}).content == b"by the code"
        assert run(client, "print(open('made.txt').read())")["stdout"] == "by the code\n"
        # The new session's own uid now: what the old one made is writable again.
        assert run(client, "open('made.txt', 'a').write('!')")["status"] == "SUCCESS"
        assert (mount_folder / "made.txt").read_text() == "by the code!"


@pytest.mark.parametrize(
    ("host", "session_id", "warned"),
    [
        ("0.0.0.0", None, True),
        ("10.1.2.3", None, True),
        ("::", None, True),
        ("0.0.0.0", "dep-1", False),
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("localhost", None, False),
    ],
)
def test_container_mode_warns_when_it_listens_beyond_loopback_without_a_session_id(
    host: str, session_id: str | None, warned: bool
) -> None:
    config = Config(mode="container", host=host, session_id=session_id)
    warning = container_warning(config)
    assert (warning is not None) == warned
    if warning is not None:
        assert "SESSION_ID" in warning
        assert host in warning
    assert container_warning(Config(mode="gateway", host="0.0.0.0")) is None
