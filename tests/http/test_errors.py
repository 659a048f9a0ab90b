"""One table from corral errors to statuses, looked up by MRO; nothing unexpected leaks."""

from __future__ import annotations

from typing import Any

import pytest

from corral._config import Config
from corral.engine import Engine
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


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"code": 5}, "field 'code': Input should be a valid string"),
        ({"code": "1", "sessionId": 123}, "field 'sessionId': Input should be a valid string"),
        ({"code": "1", "timeout": 3}, "unknown field 'timeout'"),
        ({"code": "1", "inputFiles": [{"sourceUrl": 1}]}, "field 'inputFiles.0.sourceUrl'"),
    ],
)
async def test_dial_errors_name_the_field(tmp_path: Any, body: dict[str, Any], named: str) -> None:
    config = Config(mode="gateway", data_dir=tmp_path, api_keys=KEYS)
    async with Engine(capacity=1) as engine, client_for(create_app(engine, config), ALICE) as c:
        response = await c.post("/v1/ops/code_interpreter/execute_code", json=body)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.startswith(f"Not valid JSON body: {named}"), response.text


async def test_code_over_the_limit_is_400_naming_the_limit(tmp_path: Any) -> None:
    limit = Config().limits().code_chars
    code = "x = 1\n" * (limit // 6 + 1)
    expected = (
        f"Field 'code' is too long: {len(code)} characters, the limit (code_chars) is {limit}"
    )
    gateway = Config(mode="gateway", data_dir=tmp_path, api_keys=KEYS)
    async with Engine(capacity=1) as engine:
        async with client_for(create_app(engine, gateway), ALICE) as client:
            response = await client.post(
                "/v1/ops/code_interpreter/execute_code", json={"code": code}
            )
            assert (response.status_code, response.text) == (400, expected)
        container = gateway.replace(mode="container")
        async with client_for(create_app(engine, container)) as client:
            response = await client.post("/execute_code", json={"code": code})
            assert (response.status_code, response.json()) == (400, {"detail": expected})
