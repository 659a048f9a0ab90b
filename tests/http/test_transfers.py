"""Gateway file operations and transfers, with DIAL Core's checks in order (docs/dial.md §5.6
and §5.8), on the sandbox's in-process twin; links code plants and its /mnt/data, on the real
sandbox."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import ALICE, BOB, execute, open_session, post, put_file, text

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]


async def _bucket(client: httpx.AsyncClient) -> str:
    response = await client.get("/v1/bucket")
    assert response.status_code == 200
    bucket: str = response.json()["bucket"]
    return bucket


async def _upload(
    client: httpx.AsyncClient,
    session_id: str | None,
    name: str,
    data: bytes,
    field: str = "attachment",
) -> httpx.Response:
    params = {} if session_id is None else {"session_id": session_id}
    return await client.post(
        "/v1/ops/code_interpreter/upload_file",
        params=params,
        files={field: (name, data, "application/octet-stream")},
    )


async def test_upload_download_list(client: httpx.AsyncClient) -> None:
    session_id = await open_session(client)
    uploaded = await _upload(client, session_id, "sub/dir/t.csv", b"a,b\n")
    assert uploaded.content == b'{"path":"sub/dir/t.csv","size":4}'
    absolute = await _upload(client, session_id, "/mnt/data/abs.csv", b"1")
    assert absolute.json() == {"path": "abs.csv", "size": 1}
    listed = await post(client, "list_files", {"sessionId": session_id})
    assert listed.json() == {
        "files": [{"path": "abs.csv", "size": 1}, {"path": "sub/dir/t.csv", "size": 4}]
    }
    download = await post(
        client, "download_file", {"sessionId": session_id, "path": "sub/dir/t.csv"}
    )
    assert download.content == b"a,b\n"
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.headers["content-length"] == "4"
    seen = await execute(client, "open('sub/dir/t.csv').read()", session_id)
    assert seen["result"] == {"text/plain": "'a,b\\n'"}


async def test_upload_checks_in_order(client: httpx.AsyncClient) -> None:
    session_id = await open_session(client)
    url = "/v1/ops/code_interpreter/upload_file"
    assert text(await client.post(url, files={"f": ("a", b"1")})) == (
        400,
        "Missing session_id query param",
    )
    for kwargs in ({"json": {"a": 1}}, {"data": {"file": "text"}}, {"content": b"raw"}):
        response = await client.post(url, params={"session_id": session_id}, **kwargs)
        assert text(response) == (400, "Missing filename in multipart upload")
    unknown = await _upload(client, "nope", "a.txt", b"1")
    assert text(unknown) == (404, "Session is not found: nope")
    invalid = await _upload(client, "bad/", "a.txt", b"1")
    assert text(invalid) == (400, "Invalid sessionId: bad/")
    for name, detail in (
        ("../x.csv", "Bad path: /mnt/x.csv"),
        ("../data2/x.csv", "Bad path: /mnt/data2/x.csv"),
        ("/etc/passwd", "Bad path: /etc/passwd"),
        (".", "Bad path: /mnt/data"),
    ):
        response = await _upload(client, session_id, name, b"1")
        assert (response.status_code, response.json()) == (400, {"detail": detail})
    await _upload(client, session_id, "file.txt", b"1")
    through = await _upload(client, session_id, "file.txt/x", b"1")
    assert (through.status_code, through.json()) == (
        400,
        {"detail": "Bad path: /mnt/data/file.txt/x"},
    )


async def test_upload_limit(
    engine: Engine, gateway_config: Config, make_client: MakeClient
) -> None:
    app = create_app(engine, gateway_config.replace(upload_max_size=8))
    async with make_client(app, ALICE) as client:
        session_id = await open_session(client)
        await _upload(client, session_id, "keep.bin", b"old")
        too_big = await _upload(client, session_id, "keep.bin", b"x" * 9)
        assert (too_big.status_code, too_big.json()) == (413, {"detail": "File too large"})
        assert (await _upload(client, session_id, "exact.bin", b"x" * 8)).status_code == 200
        bucket = await _bucket(client)
        assert (await put_file(client, f"files/{bucket}/big.bin", b"x" * 9)).status_code == 413
        assert (await put_file(client, f"files/{bucket}/ok.bin", b"x" * 8)).status_code == 200
        moved = await post(
            client,
            "transfer_input_file",
            {
                "sessionId": session_id,
                "sourceUrl": f"files/{bucket}/ok.bin",
                "targetPath": "in.bin",
            },
        )
        assert moved.json() == {"path": "in.bin", "size": 8}
        listed = await post(client, "list_files", {"sessionId": session_id})
        assert listed.json()["files"] == [
            {"path": "exact.bin", "size": 8},
            {"path": "in.bin", "size": 8},
            {"path": "keep.bin", "size": 3},
        ]


async def test_download_errors(client: httpx.AsyncClient) -> None:
    session_id = await open_session(client)
    await execute(client, "import os; os.mkdir('sub')", session_id)
    for path, relative in (("nope.csv", "nope.csv"), ("sub", "sub"), ("", ".")):
        response = await post(client, "download_file", {"sessionId": session_id, "path": path})
        assert (response.status_code, response.json()) == (
            404,
            {"detail": f"File not found: {relative}"},
        )
    escape = await post(
        client, "download_file", {"sessionId": session_id, "path": "../../etc/passwd"}
    )
    assert (escape.status_code, escape.json()) == (400, {"detail": "Bad path: /etc/passwd"})
    nul = await post(client, "download_file", {"sessionId": session_id, "path": "a\0b"})
    assert text(nul) == (400, "Bad file path:a\0b")


PLANT = """
import os
os.symlink('/etc/passwd', 'passwd')
os.symlink('/etc', 'etc')
os.symlink('/', 'root')
os.symlink('nowhere', 'broken')
os.mkfifo('fifo')
open('real.txt', 'w').write('real')
"""


async def test_links_planted_by_code_never_leak(real_client: httpx.AsyncClient) -> None:
    client = real_client
    session_id = await open_session(client)
    assert (await execute(client, PLANT, session_id))["status"] == "SUCCESS"
    bucket = await _bucket(client)
    for path in ("passwd", "etc/passwd", "root/etc/passwd", "broken", "fifo"):
        response = await post(client, "download_file", {"sessionId": session_id, "path": path})
        assert (response.status_code, response.json()) == (
            404,
            {"detail": f"File not found: {path}"},
        )
        out = await post(
            client,
            "transfer_output_file",
            {"sessionId": session_id, "sourcePath": path, "targetUrl": f"files/{bucket}/leak.txt"},
        )
        assert (out.status_code, out.json()) == (404, {"detail": f"File not found: {path}"})
    listed = await post(client, "list_files", {"sessionId": session_id})
    assert listed.json() == {"files": [{"path": "real.txt", "size": 4}]}
    assert (await client.get(f"/v1/files/{bucket}/leak.txt")).status_code == 404
    through = await _upload(client, session_id, "etc/evil", b"x")
    assert (through.status_code, through.json()) == (
        400,
        {"detail": "Bad path: /mnt/data/etc/evil"},
    )
    # An output file through a link in execute_code fails the request the same way.
    failed = await post(
        client,
        "execute_code",
        {
            "sessionId": session_id,
            "code": "1",
            "outputFiles": [{"sourcePath": "passwd", "targetUrl": f"files/{bucket}/leak.txt"}],
        },
    )
    assert (failed.status_code, failed.json()) == (404, {"detail": "File not found: passwd"})


async def test_transfer_input_checks_in_order(
    gateway_app: FastAPI, make_client: MakeClient
) -> None:
    async with make_client(gateway_app, ALICE) as alice, make_client(gateway_app, BOB) as bob:
        session_id = await open_session(alice)
        mine = await _bucket(alice)
        theirs = await _bucket(bob)
        await put_file(alice, f"files/{mine}/in.csv", b"1,2\n")
        await put_file(bob, f"files/{theirs}/secret.csv", b"s")

        async def transfer(**body: object) -> tuple[int, str]:
            return text(await post(alice, "transfer_input_file", body))

        source = f"files/{mine}/in.csv"
        assert await transfer(sourceUrl=source, targetPath="x") == (400, "Missing sessionId")
        assert await transfer(sessionId="nope", sourceUrl=source) == (400, "Bad file path:null")
        assert await transfer(sessionId="nope", targetPath="x", sourceUrl="http://x") == (
            400,
            "Bad file url:http://x",
        )
        other = f"files/{theirs}/secret.csv"
        assert await transfer(sessionId="nope", targetPath="x", sourceUrl=other) == (
            403,
            f"File is not accessible: {other}",
        )
        missing = f"files/{mine}/missing.csv"
        assert await transfer(sessionId="nope", targetPath="x", sourceUrl=missing) == (
            404,
            f"File is not found: {missing}",
        )
        assert await transfer(sessionId="nope", targetPath="x", sourceUrl=source) == (
            404,
            "Session is not found: nope",
        )
        assert await transfer(sessionId=session_id, targetPath="../x", sourceUrl=source) == (
            400,
            '{"detail":"Bad path: /mnt/x"}',
        )
        assert await transfer(sessionId=session_id, targetPath="d/in.csv", sourceUrl=source) == (
            200,
            '{"path":"d/in.csv","size":4}',
        )


async def test_transfer_output(real_client: httpx.AsyncClient) -> None:
    client = real_client
    session_id = await open_session(client)
    bucket = await _bucket(client)
    await execute(client, "open('/mnt/data/plot.png', 'wb').write(b'PNG')", session_id)
    url = f"files/{bucket}/out/plot%20one.png"
    response = await post(
        client,
        "transfer_output_file",
        {"sessionId": session_id, "sourcePath": "plot.png", "targetUrl": url},
    )
    assert response.status_code == 200, response.text
    meta = response.json()
    assert {
        k: meta[k] for k in ("name", "parentPath", "bucket", "url", "nodeType", "resourceType")
    } == {
        "name": "plot one.png",
        "parentPath": "out",
        "bucket": bucket,
        "url": url,
        "nodeType": "ITEM",
        "resourceType": "FILE",
    }
    assert (meta["contentLength"], meta["contentType"]) == (3, "image/png")
    stored = await client.get(f"/v1/{url}")
    assert (stored.content, stored.headers["content-type"]) == (b"PNG", "image/png")
    denied = await post(
        client,
        "transfer_output_file",
        {"sessionId": session_id, "sourcePath": "plot.png", "targetUrl": "files/other/x.png"},
    )
    assert text(denied) == (403, "File is not accessible: files/other/x.png")


async def test_execute_with_input_and_output_files(client: httpx.AsyncClient) -> None:
    bucket = await _bucket(client)
    await put_file(client, f"files/{bucket}/data.csv", b"a\n1\n2\n")
    code = (
        "import csv\n"
        "rows = list(csv.DictReader(open('data.csv')))\n"
        "open('sum.txt', 'w').write(str(sum(int(r['a']) for r in rows)))\n"
        "len(rows)"
    )
    body = {
        "code": code,
        "inputFiles": [
            {
                "sourceUrl": f"files/{bucket}/data.csv",
                "targetPath": "data.csv",
                "sessionId": "ignored",
            }
        ],
        "outputFiles": [{"sourcePath": "sum.txt", "targetUrl": f"files/{bucket}/results/sum.txt"}],
    }
    result = await execute(client, **body)  # type: ignore[arg-type]
    assert result == {
        "status": "SUCCESS",
        "stdout": "",
        "stderr": "",
        "result": {"text/plain": "2"},
        "display": [],
    }
    assert (await client.get(f"/v1/files/{bucket}/results/sum.txt")).content == b"3"
    # Output files are copied whatever the status; a missing one fails the whole request.
    failing = {**body, "code": "open('sum.txt','w').write('9'); 1/0"}
    assert (await execute(client, **failing))["status"] == "FAILURE"  # type: ignore[arg-type]
    assert (await client.get(f"/v1/files/{bucket}/results/sum.txt")).content == b"9"
    missing = await post(
        client,
        "execute_code",
        {
            "code": "1",
            "outputFiles": [{"sourcePath": "none.txt", "targetUrl": f"files/{bucket}/x"}],
        },
    )
    assert (missing.status_code, missing.json()) == (404, {"detail": "File not found: none.txt"})
    bad_input = await post(
        client,
        "execute_code",
        {"code": "1", "inputFiles": [{"sourceUrl": f"files/{bucket}/nope", "targetPath": "x"}]},
    )
    assert text(bad_input) == (404, f"File is not found: files/{bucket}/nope")
