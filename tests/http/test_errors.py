"""One table from corral errors to statuses, looked up by MRO; nothing unexpected leaks."""

from __future__ import annotations

from typing import Any

import pytest

from corral._config import Config
from corral.errors import (
    Busy,
    CorralError,
    EngineClosed,
    FileTooLarge,
    InvalidPath,
    RemoteTimeout,
    SessionClosed,
    SessionDiskFull,
    SessionNotFound,
    WorkerCrashed,
)
from corral.http import create_app
from corral.http._errors import status_for
from tests.http.httpkit import ALICE, KEYS, client_for

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (SessionNotFound("x"), 404),
        (SessionClosed("x"), 404),
        (InvalidPath("x"), 400),
        (FileTooLarge("x"), 413),
        (SessionDiskFull("x"), 413),
        (Busy("x"), 503),
        (EngineClosed("x"), 503),
        (WorkerCrashed("x"), 500),
        (RemoteTimeout("x"), 500),
        (CorralError("x"), 500),
        (ValueError("x"), 500),
    ],
)
def test_status_by_most_specific_class(error: BaseException, status: int) -> None:
    assert status_for(error) == status


class _BrokenEngine:
    """An engine whose every call fails, to see how failures reach the client."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def statistics(self) -> Any:
        raise self.error

    async def run(self, code: str, **kwargs: Any) -> Any:
        raise self.error

    async def open_session(self) -> Any:
        raise self.error

    def get_session(self, session_id: str) -> Any:
        raise self.error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("secret host detail"), (500, "Internal error")),
        (EngineClosed("closed"), (503, "Code interpreter is not available")),
        (Busy("full"), (503, "Code interpreter is busy, retry later")),
    ],
)
async def test_failures_become_plain_answers(
    tmp_path: Any, error: Exception, expected: tuple[int, str]
) -> None:
    config = Config(mode="gateway", data_dir=tmp_path, api_keys=KEYS)
    app = create_app(_BrokenEngine(error), config)
    async with client_for(app, ALICE) as client:
        for response in (
            await client.post("/v1/ops/code_interpreter/open_session", json={}),
            await client.post("/v1/ops/code_interpreter/execute_code", json={"code": "1"}),
        ):
            assert (response.status_code, response.text) == expected
            if isinstance(error, Busy):
                assert response.headers["retry-after"] == "1"
    container = create_app(_BrokenEngine(error), config.replace(mode="container"))
    async with client_for(container) as client:
        response = await client.post("/execute_code", json={"code": "1"})
        assert (response.status_code, response.json()) == (expected[0], {"detail": expected[1]})
