"""One table from corral errors to statuses, looked up by MRO; nothing unexpected leaks."""

from __future__ import annotations

import logging
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
from corral.network import NO_NETWORK, SandboxNetwork
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

    async def open_session(
        self,
        *,
        tenant: str = "",
        network: SandboxNetwork = NO_NETWORK,
        template: str = "",
        snapshot: str | None = None,
    ) -> Any:
        raise self.error

    def template(self, name: str, tenant: str) -> Any:
        raise self.error

    def get_session(self, session_id: str) -> Any:
        raise self.error

    def sessions(self) -> list[Any]:
        return []  # none kept from before: the app starts

    @property
    def paused(self) -> Any:
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
async def test_dial_errors_name_the_field(
    engine: Engine, tmp_path: Any, body: dict[str, Any], named: str
) -> None:
    config = Config(mode="gateway", data_dir=tmp_path, api_keys=KEYS)
    async with client_for(create_app(engine, config), ALICE) as c:
        response = await c.post("/v1/ops/code_interpreter/execute_code", json=body)
    assert (response.status_code, response.text) == (400, "Not valid JSON body")
    assert response.headers["content-type"].startswith("text/plain")
    assert response.headers["Corral-Error-Detail"].startswith(named), response.headers


async def test_the_detail_header_is_printable_ascii_whatever_the_field_name(
    engine: Engine, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A client names the unknown field: a newline, a character past latin-1 or a long name must
    not break the header (a 500) or grow it without bound; the log keeps the same words."""
    config = Config(mode="gateway", data_dir=tmp_path, api_keys=KEYS)
    body = '{"code": "1", "x\\n\\u20ac' + "y" * 2000 + '": 1}'
    async with client_for(create_app(engine, config), ALICE) as c:
        with caplog.at_level(logging.INFO, logger="corral.http"):
            response = await c.post(
                "/v1/ops/code_interpreter/execute_code", content=body,
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
    assert (response.status_code, response.text) == (400, "Not valid JSON body")
    detail = response.headers["Corral-Error-Detail"]
    assert detail.startswith("unknown field 'x\\n\\u20acyyy")
    assert detail.isascii()
    assert detail.isprintable()
    assert len(detail) <= 512
    assert "answered 400 Not valid JSON body: unknown field" in caplog.text


async def test_code_over_the_limit_is_400_naming_the_limit(engine: Engine, tmp_path: Any) -> None:
    limit = Config().limits().code_chars
    code = "x = 1\n" * (limit // 6 + 1)
    expected = (
        f"Field 'code' is too long: {len(code)} characters, the limit (code_chars) is {limit}"
    )
    gateway = Config(mode="gateway", data_dir=tmp_path, api_keys=KEYS)
    async with client_for(create_app(engine, gateway), ALICE) as client:
        response = await client.post("/v1/ops/code_interpreter/execute_code", json={"code": code})
        assert (response.status_code, response.text) == (400, expected)
    container = gateway.replace(mode="container")
    async with client_for(create_app(engine, container)) as client:
        response = await client.post("/execute_code", json={"code": code})
        assert (response.status_code, response.json()) == (400, {"detail": expected})
