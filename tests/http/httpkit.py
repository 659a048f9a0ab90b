"""Shared helpers for the HTTP tests: API keys, in-process clients, DIAL operation calls."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from corral._config import ApiKey

ALICE = "alice-key"  # role "coder"
BOB = "bob-key"  # no roles
APP = "app-key"  # an application's per-request key, no roles
KEYS = (
    ApiKey(key=ALICE, user="alice", roles=("coder",)),
    ApiKey(key=BOB, user="bob"),
    ApiKey(key=APP, user="quickapps", per_request=True),
)
OPS = "/v1/ops/code_interpreter"
TIMEOUT = 20  # seconds: the test engines' and configs' run time limit


def client_for(app: FastAPI, key: str | None = None) -> httpx.AsyncClient:
    """An in-process client (no socket) sending ``Api-Key: key``."""
    headers = {"Api-Key": key} if key else {}
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://corral", headers=headers)


async def post(
    client: httpx.AsyncClient, op: str, body: Any = None, **kwargs: Any
) -> httpx.Response:
    """``POST /v1/ops/code_interpreter/<op>`` with ``body`` as JSON."""
    if body is not None:
        kwargs["json"] = body
    return await client.post(f"{OPS}/{op}", **kwargs)


def text(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.text


async def open_session(client: httpx.AsyncClient, session_id: str | None = None) -> str:
    response = await post(client, "open_session", {"sessionId": session_id})
    assert response.status_code == 200, response.text
    body = response.json()
    assert list(body) == ["sessionId"]
    return str(body["sessionId"])


async def execute(
    client: httpx.AsyncClient, code: str, session_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    response = await post(client, "execute_code", {"sessionId": session_id, "code": code, **extra})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def put_file(
    client: httpx.AsyncClient, url: str, data: bytes, content_type: str = "text/csv"
) -> httpx.Response:
    """``PUT /v1/<url>`` as DIAL's files API takes it (multipart)."""
    name = url.rpartition("/")[2]
    return await client.put(f"/v1/{url}", files={"file": (name, data, content_type)})
