"""A bucket of the files store holds at most its quota, and one request names a bounded number
of transfers: no key can fill the host's disk (a sparse session file costs the session nothing
but is copied into the store as real bytes)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from corral._config import Config
from corral.engine import Engine
from corral.errors import BucketFull, FileTooLarge
from corral.http import create_app
from corral.http._models import MAX_TRANSFERS
from corral.http._store import FileStore
from tests.http.httpkit import ALICE, client_for, execute, open_session, post

pytestmark = pytest.mark.anyio

_KIB = 1024


async def test_a_bucket_holds_at_most_its_quota(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "files", bucket_quota=10 * _KIB)
    await store.put_bytes("a", "one", b"x" * 6 * _KIB, "text/plain")
    with pytest.raises(BucketFull):
        await store.put_bytes("a", "two", b"x" * 5 * _KIB, "text/plain")
    # Replacing a file counts the new size only; another bucket has its own quota.
    await store.put_bytes("a", "one", b"y" * 9 * _KIB, "text/plain")
    await store.put_bytes("b", "one", b"z" * 9 * _KIB, "text/plain")
    assert await store.get("a", "two") is None
    stored = await store.get("a", "one")
    assert stored is not None
    assert await store.read(stored) == b"y" * 9 * _KIB
    blobs = [p for p in (tmp_path / "files" / "blobs").rglob("*") if p.is_file()]
    assert len(blobs) == 2  # the refused write left nothing behind


async def test_the_upload_limit_stays_a_file_too_large(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "files", bucket_quota=10 * _KIB)

    async def chunks() -> AsyncIterator[bytes]:
        yield b"x" * 4 * _KIB

    with pytest.raises(FileTooLarge) as raised:
        await store.put("a", "f", chunks(), "text/plain", max_bytes=2 * _KIB)
    assert not isinstance(raised.value, BucketFull)


async def test_sparse_session_files_cannot_fill_the_store(
    engine: Engine, gateway_config: Config
) -> None:
    config = dataclasses.replace(gateway_config, bucket_quota_bytes=3 * 1024 * _KIB)
    async with client_for(create_app(engine, config), ALICE) as c:
        bucket = (await c.get("/v1/bucket")).json()["bucket"]
        session_id = await open_session(c)
        await execute(c, "open('s.bin', 'wb').truncate(2 * 1024 * 1024)", session_id)

        async def transfer(name: str) -> httpx.Response:
            url = f"files/{bucket}/{name}"
            body = {"sessionId": session_id, "sourcePath": "s.bin", "targetUrl": url}
            return await post(c, "transfer_output_file", body)

        assert (await transfer("one.bin")).status_code == 200
        refused = await transfer("two.bin")
        assert refused.status_code == 413
        assert refused.text.startswith("Bucket quota exceeded"), refused.text
        many = [
            {"sourcePath": "s.bin", "targetUrl": f"files/{bucket}/{i}"}
            for i in range(MAX_TRANSFERS + 1)
        ]
        answer = await post(c, "execute_code", {"code": "1", "outputFiles": many})
        assert (answer.status_code, answer.text) == (400, "Not valid JSON body")  # DIAL's own
        assert "outputFiles" in answer.headers["corral-error-detail"]
