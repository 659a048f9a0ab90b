"""What /run_code answers when the sandbox, not the program, is at fault: 504 with
Retry-After for a full queue (verl retries only that), SandboxError for a broken worker, and
no other 5xx. On the sandbox's in-process twin (waits for a worker under a mock clock): code
that sleeps or ends its own process is played by a stand-in that does the same."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from corral._config import Config
from corral.engine import Engine, ExecutionResult
from corral.http import create_app
from corral.http._sandboxfusion_wire import passed, to_response, work_path
from tests.http.httpkit import KEYS, client_for
from tests.http.twinkit import Script, crashes, on_mock_clock, sleeps

pytestmark = pytest.mark.anyio

HOLD = "import time\ntime.sleep(30)"
SLOW = "import time\ntime.sleep(1.5)"
EXITS = "import os\nos._exit(0)"


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {HOLD: sleeps(30), SLOW: sleeps(1.5), EXITS: crashes()}


def _config(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path / "data", api_keys=KEYS, timeout=40, open_run_code=True)


async def _until_running(engine: Engine, count: int) -> None:
    with anyio.fail_after(20):
        while engine.statistics().running < count:  # noqa: ASYNC110 - no event for it
            await anyio.sleep(0.01)


@contextlib.asynccontextmanager
async def _holding(
    client: httpx.AsyncClient, engine: Engine, body: dict[str, Any]
) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: client.post("/run_code", json=body))
        await _until_running(engine, 1)
        yield
        tg.cancel_scope.cancel()


@on_mock_clock
async def test_a_full_queue_is_504_with_retry_after(
    engine_factory: Callable[..., Any], tmp_path: Path
) -> None:
    async with engine_factory(capacity=1, queue_size=0) as engine:
        app = create_app(engine, _config(tmp_path))
        async with client_for(app) as client:
            hold = {"code": HOLD, "language": "python", "run_timeout": 30}
            async with _holding(client, engine, hold):
                response = await client.post(
                    "/run_code", json={"code": "print(1)", "language": "python"}
                )
                assert response.status_code == 504
                assert response.headers["retry-after"] == "1"
                batch = await client.post(
                    "/run_code_batch", json={"code": "print(1)", "cases": [{"stdin": ""}]}
                )
                assert batch.status_code == 504
                assert batch.headers["retry-after"] == "1"


@on_mock_clock
async def test_waiting_for_a_worker_is_bounded_and_not_part_of_run_timeout(
    engine_factory: Callable[..., Any], tmp_path: Path
) -> None:
    async with engine_factory(capacity=1, queue_size=8) as engine:
        app = create_app(engine, _config(tmp_path))
        async with client_for(app) as client:
            hold = {"code": HOLD, "language": "python", "run_timeout": 30}
            async with _holding(client, engine, hold):
                waited = await client.post(
                    "/run_code",
                    json={"code": "print(1)", "language": "python", "compile_timeout": 0},
                )
                assert waited.status_code == 504
                assert "no worker became free" in waited.json()["detail"]
            # Behind a program that holds the only worker for longer than this run's own
            # timeout, the run still gets its full timeout once a worker frees up.
            async with anyio.create_task_group() as tg:
                slow = {"code": SLOW, "language": "python"}
                tg.start_soon(lambda: client.post("/run_code", json=slow))
                await _until_running(engine, 1)
                quick = await client.post(
                    "/run_code",
                    json={"code": "print('ran')", "language": "python", "run_timeout": 1},
                )
            assert quick.json()["status"] == "Success", quick.json()
            assert quick.json()["run_result"]["stdout"] == "ran\n"


async def test_a_worker_that_dies_is_sandbox_error(engine: Engine, tmp_path: Path) -> None:
    app = create_app(engine, _config(tmp_path))
    async with client_for(app) as client:
        response = await client.post("/run_code", json={"code": EXITS, "language": "python"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "SandboxError"
    assert body["message"]
    assert body["run_result"] is None


@pytest.mark.parametrize(
    "outcome", ["worker_error", "busy", "cancelled", "unavailable_source", "quota_exceeded"]
)
def test_infrastructure_outcomes_never_look_like_a_wrong_answer(outcome: Any) -> None:
    result = ExecutionResult(outcome=outcome, message="the worker failed: boom")
    response = to_response(result, [])
    assert response["status"] == "SandboxError"
    assert response["message"] == "the worker failed: boom"
    assert passed(response, "anything") is False


def test_program_outcomes_map_to_sandboxfusion_statuses() -> None:
    def rc(outcome: Any, **fields: Any) -> tuple[str, str, int | None]:
        response = to_response(ExecutionResult(outcome=outcome, **fields), [])
        run = response["run_result"]
        return response["status"], run["status"], run["return_code"]

    from corral.engine import ErrorInfo

    def exit_error(text: str) -> ErrorInfo:
        return ErrorInfo("SystemExit", text, "")

    assert rc("ok") == ("Success", "Finished", 0)
    assert rc("timeout") == ("Failed", "TimeLimitExceeded", None)
    assert rc("memory_limit", error=ErrorInfo("MemoryError", "", "")) == ("Failed", "Finished", 1)
    assert rc("python_error", error=exit_error("")) == ("Success", "Finished", 0)
    assert rc("python_error", error=exit_error("None")) == ("Success", "Finished", 0)
    assert rc("python_error", error=exit_error("256")) == ("Success", "Finished", 0)
    assert rc("python_error", error=exit_error("-1")) == ("Failed", "Finished", 255)
    assert rc("python_error", error=exit_error("bye")) == ("Failed", "Finished", 1)
    refused = to_response(ExecutionResult(outcome="invalid_input", message="a NUL"), [])
    assert refused["run_result"]["stderr"] == "a NUL\n"


def test_verls_comparison_ignores_trailing_newlines_only() -> None:
    ok = to_response(ExecutionResult(outcome="ok", stdout="3\n\n"), [])
    assert passed(ok, "3") is True
    assert passed(ok, " 3") is False
    assert passed(ok, None) is None
    failed = to_response(ExecutionResult(outcome="timeout", stdout="3\n"), [])
    assert passed(failed, "3") is False


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a.txt", "a.txt"),
        ("./d/../a.txt", "a.txt"),
        ("/work/x/y", "x/y"),
        ("/mnt/data/z", "z"),
        ("/etc/passwd", None),
        ("../up", None),
        ("..", None),
        ("/work/", None),
        ("a\0b", None),
    ],
)
def test_work_paths(given: str, expected: str | None) -> None:
    assert work_path(given) == expected


@pytest.mark.parametrize("body", [b"\x80", b'{"code": "\xff", "language": "python"}', b"[]", b""])
async def test_bodies_that_are_not_json_objects_are_422(
    engine: Engine, tmp_path: Path, body: bytes
) -> None:
    app = create_app(engine, _config(tmp_path))
    async with client_for(app) as client:
        for route in ("/run_code", "/run_code_batch"):
            response = await client.post(route, content=body)
            assert response.status_code == 422, (route, body, response.text)
            assert response.json()["detail"]


async def test_values_json_cannot_carry_come_back_as_written(
    engine: Engine, tmp_path: Path
) -> None:
    # Python's JSON parser (and pydantic's) accepts Infinity and NaN; an answer cannot hold them.
    app = create_app(engine, _config(tmp_path))
    body = b'{"code": Infinity, "language": "python", "files": {"a": [NaN, -Infinity]}}'
    async with client_for(app) as client:
        for route in ("/run_code", "/run_code_batch"):
            response = await client.post(route, content=body)
            assert response.status_code == 422, (route, response.text)
            inputs = [item["input"] for item in response.json()["detail"]]
            assert "inf" in inputs, inputs  # as the other 422s echo it: its repr
