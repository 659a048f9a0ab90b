"""Container mode: DIAL's interpreter container, byte for byte (docs/dial.md §4), on the
sandbox's in-process twin; what code does to /mnt/data and links it plants, on the real one."""

from __future__ import annotations

import socket
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI, UploadFile
from pydantic import BaseModel

from corral._config import Config
from corral.http import create_app, serve_async

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]


def _client(engine: Any, config: Config) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(engine, config))
    return httpx.AsyncClient(transport=transport, base_url="http://container")


@pytest.fixture
async def container(engine: Any, container_config: Config) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(engine, container_config) as http:
        yield http


@pytest.fixture
async def real_container(
    real_engine: Any, container_config: Config
) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(real_engine, container_config) as http:
        yield http


class ExecuteCodeRequest(BaseModel):
    code: str


class DownloadFileRequest(BaseModel):
    path: str


class ListFilesRequest(BaseModel):
    comment: str | None = None


def _reference_app() -> FastAPI:
    """The reference container's signatures, to compare FastAPI's 422 bodies with."""
    app = FastAPI()

    @app.post("/execute_code")
    async def execute_code(request: ExecuteCodeRequest) -> dict[str, str]:
        return {}

    @app.post("/upload_file")
    async def upload_file(file: UploadFile) -> dict[str, str]:
        return {}

    @app.post("/download_file")
    async def download_file(request: DownloadFileRequest) -> dict[str, str]:
        return {}

    @app.post("/list_files")
    async def list_files(request: ListFilesRequest) -> dict[str, str]:
        return {}

    return app


async def test_health(container: httpx.AsyncClient) -> None:
    response = await container.get("/health")
    assert response.status_code == 200
    assert response.content == b'{"status":"HEALTHY"}'


async def test_execute_returns_exactly_the_five_fields(container: httpx.AsyncClient) -> None:
    response = await container.post("/execute_code", json={"code": "1+2"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == (
        b'{"status":"SUCCESS","stdout":"","stderr":"","result":{"text/plain":"3"},"display":[]}'
    )
    await container.post("/execute_code", json={"code": "x = 5", "foo": 1})
    second = await container.post("/execute_code", json={"code": "x * 2"})
    assert second.json()["result"] == {"text/plain": "10"}
    failed = await container.post("/execute_code", json={"code": "1/0"})
    assert failed.status_code == 200
    body = failed.json()
    assert list(body) == ["status", "stdout", "stderr", "result", "display"]
    assert body["status"] == "FAILURE"
    assert body["stderr"].rstrip().endswith("ZeroDivisionError: division by zero")


REQUESTS_422: list[tuple[str, dict[str, Any]]] = [
    ("/execute_code", {"json": {}}),
    ("/execute_code", {}),
    ("/execute_code", {"json": {"code": 5}}),
    ("/execute_code", {"json": []}),
    ("/execute_code", {"content": b"{}", "headers": {"content-type": "text/plain"}}),
    ("/execute_code", {"content": b"{nope", "headers": {"content-type": "application/json"}}),
    ("/download_file", {"json": {}}),
    ("/list_files", {}),
    ("/list_files", {"json": []}),
    ("/upload_file", {"json": {"path": "x"}}),
    ("/upload_file", {"files": {"other": ("a.txt", b"x")}}),
    ("/upload_file", {"data": {"file": "just text"}}),
]


@pytest.mark.parametrize(("path", "kwargs"), REQUESTS_422)
async def test_validation_errors_match_the_reference(
    container: httpx.AsyncClient, path: str, kwargs: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_reference_app()), base_url="http://reference"
    ) as reference:
        expected = await reference.post(path, **kwargs)
    response = await container.post(path, **kwargs)
    assert expected.status_code == 422, expected.json()
    assert (response.status_code, response.json()) == (422, expected.json())


async def test_routing_errors(container: httpx.AsyncClient) -> None:
    missing = await container.get("/nope")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    wrong = await container.get("/execute_code")
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})


async def test_session_header(engine: Any, container_config: Config) -> None:
    app = create_app(engine, container_config.replace(session_id="dep-1"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as c:
        assert (await c.get("/health")).status_code == 200
        missing = await c.post("/execute_code", json={"code": "1"})
        assert (missing.status_code, missing.json()) == (
            400,
            {"detail": "Missing x-dial-session-id header"},
        )
        for value in ("dep-2", ""):
            wrong = await c.post("/list_files", json={}, headers={"x-dial-session-id": value})
            assert (wrong.status_code, wrong.json()) == (
                503,
                {"detail": "Mismatching x-dial-session-id header"},
            )
        invalid = await c.post("/execute_code", json={})
        assert invalid.status_code == 422  # validation comes before the header check
        ok = await c.post(
            "/execute_code", json={"code": "1"}, headers={"X-DIAL-SESSION-ID": "dep-1"}
        )
        assert ok.status_code == 200
        upload = await c.post("/upload_file", files={"file": ("a.txt", b"x")})
        assert upload.status_code == 400
        download = await c.post("/download_file", json={"path": "a.txt"})
        assert download.status_code == 400


async def _upload(client: httpx.AsyncClient, name: str, data: bytes) -> httpx.Response:
    return await client.post(
        "/upload_file", files={"file": (name, data, "application/octet-stream")}
    )


async def _run(client: httpx.AsyncClient, code: str) -> dict[str, Any]:
    response = await client.post("/execute_code", json={"code": code})
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def _listed(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.post("/list_files", json={})
    assert response.status_code == 200
    files: list[dict[str, Any]] = response.json()["files"]
    return files


async def test_upload_paths(real_container: httpx.AsyncClient) -> None:
    container = real_container
    cases = [
        ("t.csv", 200, {"path": "t.csv", "size": 3}),
        ("sub/dir/t2.csv", 200, {"path": "sub/dir/t2.csv", "size": 3}),
        ("/mnt/data/abs.csv", 200, {"path": "abs.csv", "size": 3}),
        ("a/../b.csv", 200, {"path": "b.csv", "size": 3}),
        ("/etc/x.csv", 400, {"detail": "Bad path: /etc/x.csv"}),
        ("../x.csv", 400, {"detail": "Bad path: /mnt/x.csv"}),
        ("../../../../etc/passwd", 400, {"detail": "Bad path: /etc/passwd"}),
        ("../data2/x.csv", 400, {"detail": "Bad path: /mnt/data2/x.csv"}),
        ("/mnt/data2/x.csv", 400, {"detail": "Bad path: /mnt/data2/x.csv"}),
        ("sub", 400, {"detail": "Bad path: /mnt/data/sub"}),
        ("t.csv/under", 400, {"detail": "Bad path: /mnt/data/t.csv/under"}),
        (".", 400, {"detail": "Bad path: /mnt/data"}),
    ]
    for name, status, body in cases:
        response = await _upload(container, name, b"1,2")
        assert (name, response.status_code, response.json()) == (name, status, body)
    for raw, body in (
        (b"", {"detail": "Missing path"}),
        (b"a\0b", {"detail": "Bad path: /mnt/data/a\0b"}),
    ):
        response = await container.post(
            "/upload_file",
            content=b'--b\r\nContent-Disposition: form-data; name="file"; filename="'
            + raw
            + b'"\r\n\r\n1,2\r\n--b--\r\n',
            headers={"content-type": "multipart/form-data; boundary=b"},
        )
        assert (response.status_code, response.json()) == (400, body)
    assert await _listed(container) == [
        {"path": "abs.csv", "size": 3},
        {"path": "b.csv", "size": 3},
        {"path": "sub/dir/t2.csv", "size": 3},
        {"path": "t.csv", "size": 3},
    ]
    seen = await _run(container, "import os; sorted(os.listdir('/mnt/data'))")
    assert seen["result"] == {"text/plain": "['abs.csv', 'b.csv', 'sub', 't.csv']"}


async def test_upload_limit_leaves_nothing_behind(engine: Any, container_config: Config) -> None:
    app = create_app(engine, container_config.replace(upload_max_size=10))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as c:
        assert (await _upload(c, "keep.bin", b"old")).status_code == 200
        for name in ("keep.bin", "new.bin"):
            response = await _upload(c, name, b"x" * 11)
            assert (response.status_code, response.json()) == (413, {"detail": "File too large"})
        exact = await _upload(c, "exact.bin", b"x" * 10)
        assert exact.json() == {"path": "exact.bin", "size": 10}
        empty = await _upload(c, "empty.bin", b"")
        assert empty.json() == {"path": "empty.bin", "size": 0}
        # A declared body far over the limit is refused before it is read.
        huge = await c.post(
            "/upload_file",
            content=b"--b\r\n" + b"x" * 200_000,
            headers={"content-type": "multipart/form-data; boundary=b"},
        )
        assert (huge.status_code, huge.json()) == (413, {"detail": "File too large"})
        assert await _listed(c) == [
            {"path": "empty.bin", "size": 0},
            {"path": "exact.bin", "size": 10},
            {"path": "keep.bin", "size": 3},
        ]
        kept = await c.post("/download_file", json={"path": "keep.bin"})
        assert kept.content == b"old"
        files = await _run(c, "import os; sorted(os.listdir('.'))")
        assert files["result"] == {"text/plain": "['empty.bin', 'exact.bin', 'keep.bin']"}


async def test_download(container: httpx.AsyncClient) -> None:
    await _run(container, "import os; os.mkdir('sub'); open('t.csv', 'w').write('a,b\\n')")
    ok = await container.post("/download_file", json={"path": "t.csv"})
    assert ok.content == b"a,b\n"
    assert ok.headers["content-type"] == "application/octet-stream"
    assert ok.headers["content-length"] == "4"
    absolute = await container.post("/download_file", json={"path": "/mnt/data/t.csv"})
    assert absolute.content == b"a,b\n"
    for path, relative in (("nope.csv", "nope.csv"), ("sub", "sub"), ("", ".")):
        response = await container.post("/download_file", json={"path": path})
        assert (response.status_code, response.json()) == (
            404,
            {"detail": f"File not found: {relative}"},
        )
    escape = await container.post("/download_file", json={"path": "../../etc/passwd"})
    assert (escape.status_code, escape.json()) == (400, {"detail": "Bad path: /etc/passwd"})


PLANT_LINKS = """
import os
os.symlink('/etc/passwd', 'passwd')
os.symlink('/etc', 'etc')
os.symlink('/mnt', 'up')
os.symlink('nowhere', 'broken')
os.symlink('real.txt', 'inside')
os.mkfifo('fifo')
open('real.txt', 'w').write('real')
open('.hidden', 'w').write('h')
"""


async def test_links_planted_by_code_are_never_followed(
    real_container: httpx.AsyncClient,
) -> None:
    container = real_container
    planted = await _run(container, PLANT_LINKS)
    assert planted["status"] == "SUCCESS", planted
    for path in ("passwd", "etc/passwd", "up/data/real.txt", "broken", "inside", "fifo"):
        response = await container.post("/download_file", json={"path": path})
        assert (response.status_code, response.json()) == (
            404,
            {"detail": f"File not found: {path}"},
        )
    assert await _listed(container) == [
        {"path": ".hidden", "size": 1},
        {"path": "real.txt", "size": 4},
    ]
    through = await _upload(container, "etc/new.txt", b"x")
    assert (through.status_code, through.json()) == (
        400,
        {"detail": "Bad path: /mnt/data/etc/new.txt"},
    )
    onto = await _upload(container, "passwd", b"mine")
    assert onto.json() == {"path": "passwd", "size": 4}
    check = await _run(container, "import os; os.path.islink('passwd'), open('passwd').read()")
    assert check["result"] == {"text/plain": "(False, 'mine')"}


async def test_files_written_by_code_are_listed_and_downloadable(
    real_container: httpx.AsyncClient,
) -> None:
    container = real_container
    await _run(container, "open('/mnt/data/out.txt', 'w').write('hello')")
    assert {"path": "out.txt", "size": 5} in await _listed(container)
    download = await container.post("/download_file", json={"path": "out.txt"})
    assert download.content == b"hello"


DIAL_TIMEOUT = 60  # seconds: DIAL's interpreter container hard-codes it (docs/dial.md §3.4)


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.isolation
@pytest.mark.timeout(DIAL_TIMEOUT * 4)
async def test_container_mode_keeps_dials_60_second_execution_timeout(tmp_path: Path) -> None:
    """``corral serve --mode container`` with no timeout configured: a run of 40 s, past the
    30 s the gateway keeps, succeeds; one that never ends stops at DIAL's 60 s."""
    config = Config(mode="container", data_dir=tmp_path / "data", mount_folder=tmp_path / "mnt")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop = anyio.Event()
    with listener:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: serve_async(config, sockets=[listener], stop=stop))
            try:
                async with httpx.AsyncClient(base_url=url, timeout=DIAL_TIMEOUT * 2) as client:
                    past_30 = await client.post(
                        "/execute_code",
                        json={"code": "import time\ntime.sleep(40)\nprint('after 40 s')"},
                    )
                    assert past_30.json()["status"] == "SUCCESS", past_30.text
                    assert past_30.json()["stdout"] == "after 40 s\n"
                    endless = await client.post("/execute_code", json={"code": "while True: pass"})
                    assert endless.json()["status"] == "FAILURE", endless.text
                    said = f"[corral] the run exceeded its {DIAL_TIMEOUT} s time limit"
                    assert said in endless.json()["stderr"], endless.text
            finally:
                stop.set()
    assert stat.S_IMODE(config.data_dir.stat().st_mode) == 0o700
