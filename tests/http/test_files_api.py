"""The DIAL-style files API (docs/dial.md §6) and the store behind it, across restarts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from corral.http._store import FileStore
from tests.http.httpkit import ALICE, BOB, put_file, text

pytestmark = pytest.mark.anyio

MakeClient = Callable[..., httpx.AsyncClient]


async def _bucket(client: httpx.AsyncClient) -> str:
    bucket: str = (await client.get("/v1/bucket")).json()["bucket"]
    return bucket


async def test_put_get_delete(client: httpx.AsyncClient) -> None:
    bucket = await _bucket(client)
    assert (await client.get("/v1/bucket")).content == b'{"bucket":"%s"}' % bucket.encode()
    url = f"files/{bucket}/folder1/folder2/file.csv"
    put = await put_file(client, url, b"a,b\n")
    assert put.status_code == 200, put.text
    meta = put.json()
    assert meta["name"] == "file.csv"
    assert meta["parentPath"] == "folder1/folder2"
    assert meta["url"] == url
    assert (meta["nodeType"], meta["resourceType"]) == ("ITEM", "FILE")
    assert (meta["contentLength"], meta["contentType"]) == (4, "text/csv")
    assert put.headers["etag"] == meta["etag"]
    assert meta["createdAt"] <= meta["updatedAt"]
    root = await put_file(client, f"files/{bucket}/top.txt", b"t", "text/plain")
    assert root.json()["parentPath"] is None
    got = await client.get(f"/v1/{url}")
    assert got.content == b"a,b\n"
    assert (got.headers["content-type"], got.headers["etag"]) == ("text/csv", meta["etag"])
    replaced = await put_file(client, url, b"new")
    assert replaced.json()["createdAt"] == meta["createdAt"]
    assert (await client.get(f"/v1/{url}")).content == b"new"
    assert (await client.delete(f"/v1/{url}")).status_code == 200
    assert (await client.get(f"/v1/{url}")).status_code == 404
    assert (await client.delete(f"/v1/{url}")).status_code == 404


async def test_files_api_errors(gateway_app: FastAPI, make_client: MakeClient) -> None:
    async with make_client(gateway_app, ALICE) as alice, make_client(gateway_app, BOB) as bob:
        mine, theirs = await _bucket(alice), await _bucket(bob)
        assert mine != theirs
        other = f"files/{theirs}/x.csv"
        assert text(await put_file(alice, other, b"x")) == (
            403,
            f"You don't have an access to: {other}",
        )
        assert text(await alice.get(f"/v1/{other}")) == (
            403,
            f"You don't have an access to: {other}",
        )
        assert text(await alice.delete(f"/v1/{other}")) == (
            403,
            f"You don't have an access to: {other}",
        )
        folder = f"/v1/files/{mine}/folder/"
        assert text(await alice.put(folder, files={"f": ("a", b"1")})) == (
            400,
            "File name is missing",
        )
        assert text(await alice.get(folder)) == (400, "Can't download a folder")
        assert text(await alice.delete(folder)) == (400, "Can't delete a folder")
        dotted = await put_file(alice, f"files/{mine}/dir./x.csv", b"1")
        assert text(dotted) == (400, "Resource name and/or parent folders must not end with .(dot)")
        plain = await alice.put(f"/v1/files/{mine}/a.txt", content=b"x")
        assert text(plain) == (
            400,
            "Request must have a content-type header to decode a multipart request",
        )
        json_put = await alice.put(f"/v1/files/{mine}/a.txt", json={"a": 1})
        assert text(json_put) == (
            400,
            "Request must have a valid content-type header to decode a multipart request",
        )
        assert text(await alice.get(f"/v1/files/{mine}/missing.txt")) == (404, "")


async def test_store_survives_a_restart(
    engine: Engine, gateway_config: Config, make_client: MakeClient
) -> None:
    first = create_app(engine, gateway_config)
    async with make_client(first, ALICE) as client:
        bucket = await _bucket(client)
        await put_file(client, f"files/{bucket}/keep.csv", b"kept")
        await put_file(client, f"files/{bucket}/gone.csv", b"gone")
        await client.delete(f"/v1/files/{bucket}/gone.csv")
        session = await client.post("/v1/ops/code_interpreter/open_session", json={})
        session_id = session.json()["sessionId"]
    second = create_app(engine, gateway_config)  # a new process would build exactly this
    async with make_client(second, ALICE) as client:
        assert await _bucket(client) == bucket
        assert (await client.get(f"/v1/files/{bucket}/keep.csv")).content == b"kept"
        assert (await client.get(f"/v1/files/{bucket}/gone.csv")).status_code == 404
        # Sessions do not survive a restart: DIAL's 404, and clients open a new one.
        lost = await client.post(
            "/v1/ops/code_interpreter/get_session", json={"sessionId": session_id}
        )
        assert text(lost) == (404, f"Session is not found: {session_id}")


async def test_store_removes_unreferenced_blobs_on_start(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    kept = await store.put_bytes("b", "a/x.txt", b"x", "text/plain")
    replaced = await store.put_bytes("b", "a/y.txt", b"1", "text/plain")
    await store.put_bytes("b", "a/y.txt", b"2", "text/plain")
    orphan = tmp_path / "blobs" / "00" / "orphan"
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"left by a crash")
    blobs = {
        p.relative_to(tmp_path / "blobs").as_posix()
        for p in (tmp_path / "blobs").rglob("*")
        if p.is_file()
    }
    assert replaced.blob not in blobs
    assert kept.blob in blobs
    reopened = FileStore(tmp_path)
    assert not orphan.exists()
    current = await reopened.get("b", "a/y.txt")
    assert current is not None
    assert await reopened.read(current) == b"2"
    assert await reopened.get("b", "nope") is None
    assert not await reopened.delete("b", "nope")
