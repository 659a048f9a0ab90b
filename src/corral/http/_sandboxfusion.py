"""SandboxFusion's ``POST /run_code`` and corral's ``POST /run_code_batch`` (gateway mode).

For RL trainers (verl, OpenRLHF, SkyRL) and evaluations: one fresh isolated run per call or per
test case, answered in SandboxFusion's shape (``_sandboxfusion_wire``). verl retries only a
504 and scores any other error -1, so these routes answer 200 for everything a program does,
504 with ``Retry-After`` when no worker frees up in time (or the server is stopping), 401/403
for keys, 422 for a body SandboxFusion would refuse, and no other status.

``run_timeout`` is the program's own wall-clock budget, as in SandboxFusion: time spent waiting
for a worker does not count against it (a correct program must not score as timed out because
other callers' programs loop). That wait is bounded by ``compile_timeout``, which Python has
no other use for and which verl already adds to its client timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar, cast

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ValidationError

from corral._limits import Limits
from corral.engine import PYTHON_NAMES, Case, ExecutionResult, Languages
from corral.errors import EngineClosed
from corral.http._docs import json_body
from corral.http._errors import RETRY_AFTER, fail
from corral.http._responses import json_response
from corral.http._sandboxfusion_wire import (
    BatchBody,
    BatchResponseDoc,
    DetailDoc,
    RunCodeBody,
    RunCodeResponseDoc,
    decode_files,
    not_served,
    passed,
    sandbox_error,
    to_response,
    validation_detail,
)
from corral.http._state import State, caller_of, state_of

__all__ = ["OPEN_WARNING", "router"]

logger = logging.getLogger("corral.http")

_MIB = 1024 * 1024
CODE_CHARS = 1_000_000
"""Longest program accepted here: generated solutions and harnesses run long."""
OUTPUT_CHARS = 1 * _MIB
"""Per channel, as SandboxFusion reads each one (up to 1 MiB): stdout is compared whole."""
MAX_MEMORY_MB = 4096
"""Largest ``memory_limit_MB`` honoured (SandboxFusion's lite isolation is fixed at 4 GiB)."""
MIN_QUEUE_WAIT = 1.0
"""Seconds a run may always wait for a worker, even with ``compile_timeout`` 0."""
OPEN_WARNING = (
    "open_run_code is on: /run_code and /run_code_batch answer without an API key; "
    "serve them only on a private network"
)

router = APIRouter()

Body = TypeVar("Body", bound=BaseModel)


class _FedEngine(Protocol):
    """The part of ``corral.engine.Engine`` these routes call."""

    async def run_case(
        self,
        code: str,
        case: Case,
        *,
        limits: Limits | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        tenant: str = "",
        language: str = "python",
        compile_timeout: float | None = None,
    ) -> ExecutionResult: ...

    async def run_cases(
        self,
        code: str,
        cases: Sequence[Case],
        *,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        tenant: str = "",
        language: str = "python",
        compile_timeout: float | None = None,
    ) -> list[ExecutionResult]: ...

    @property
    def languages(self) -> Languages: ...


class _Busy(Exception):
    """No worker became free in time: the whole request answers 504."""


def _authorize(request: Request) -> tuple[State, str]:
    """The state and the tenant the runs are scheduled as: the key's owner, or in open mode
    the client's address (trainers on one private network then share the workers fairly)."""
    state = state_of(request)
    if state.config.open_run_code:
        host = request.client.host if request.client is not None else ""
        return state, f"address:{host}"
    caller = caller_of(request)
    state.keyring.require_code_role(caller)
    return state, caller.owner


async def _parse(request: Request, model: type[Body]) -> Body:
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        _unprocessable(validation_detail(exc))


def _unprocessable(detail: list[dict[str, Any]]) -> NoReturn:
    fail(422, {"detail": detail})


def _busy(message: str) -> Response:
    return json_response({"detail": message}, 504, headers={"Retry-After": RETRY_AFTER})


def _limits(state: State, run_timeout: float, memory_mb: int) -> Limits:
    base = state.config.limits()
    changes: dict[str, Any] = {
        "timeout": min(run_timeout, base.timeout),
        "code_chars": max(base.code_chars, CODE_CHARS),
        "output_chars": max(base.output_chars, OUTPUT_CHARS),
        "output_bytes": max(base.output_bytes, 3 * OUTPUT_CHARS),
    }
    if memory_mb > 0:
        changes["memory_bytes"] = min(memory_mb, MAX_MEMORY_MB) * _MIB
    return base.replace(**changes)


def _check_language(state: State, language: str) -> None:
    """SandboxFusion's 422 for a language whose toolchain this host lacks."""
    if language in PYTHON_NAMES:
        return
    languages = cast(_FedEngine, state.engine).languages
    if language not in languages.served:
        _unprocessable(not_served(language, ["python", *sorted(languages.served)]))


def _stdin(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8", "surrogatepass")


async def _run(
    state: State,
    code: str,
    *,
    limits: Limits,
    stdin: bytes | None,
    files: Mapping[str, bytes],
    queue_wait: float,
    tenant: str,
    language: str,
) -> ExecutionResult:
    """One run; raises ``_Busy`` instead of returning a ``busy`` result."""
    engine = cast(_FedEngine, state.engine)
    try:
        result = await engine.run_case(
            code,
            Case(stdin=stdin),
            limits=limits,
            files=files,
            queue_timeout=max(queue_wait, MIN_QUEUE_WAIT),
            tenant=tenant,
            language=language,
            compile_timeout=queue_wait,  # the compile's own bound: no floor (0: the default)
        )
    except EngineClosed as exc:
        raise _Busy("the server is stopping; try another replica or again later") from exc
    state.metrics.observe("run_code", result.outcome, result.elapsed_ms)
    if result.outcome == "busy":
        raise _Busy(result.message or "no worker is free; try again")
    return result


_ANSWERS: dict[int | str, dict[str, Any]] = {
    status: {"model": DetailDoc, "description": text}
    for status, text in (
        (401, "Missing or unknown API key (unless `[server] open_run_code`)"),
        (403, "The key may not run code"),
        (422, "A body SandboxFusion would refuse: an unknown language, a bad field"),
        (504, "No worker became free in time (`Retry-After`): retry, as verl does"),
    )
}


@router.post(
    "/run_code",
    openapi_extra=json_body(RunCodeBody),
    response_model=RunCodeResponseDoc,
    responses=_ANSWERS,
)
async def run_code(request: Request) -> Response:
    """SandboxFusion's ``run_code``, field for field: Python, and the other languages whose
    toolchains this host has (``corral doctor``): a compiled one's ``compile_result``."""
    state, tenant = _authorize(request)
    body = await _parse(request, RunCodeBody)
    _check_language(state, body.language)
    files, problems = decode_files(body.files)
    if problems:
        _unprocessable(problems)
    try:
        result = await _run(
            state,
            body.code,
            limits=_limits(state, body.run_timeout, body.memory_limit_MB),
            stdin=_stdin(body.stdin),
            files=files,
            queue_wait=body.compile_timeout,
            tenant=tenant,
            language=body.language,
        )
    except _Busy as exc:
        return _busy(str(exc))
    except Exception:  # a broken sandbox is SandboxError, never a 500 that reads as a crash
        logger.exception("run_code failed")
        return json_response(sandbox_error("exception on running code (see the server log)"))
    return json_response(to_response(result, body.fetch_files, body.language))


@router.post(
    "/run_code_batch",
    openapi_extra=json_body(BatchBody),
    response_model=BatchResponseDoc,
    responses=_ANSWERS,
)
async def run_code_batch(request: Request) -> Response:
    """One program against many cases, each a fresh isolated run; results in case order.

    The cases fork from case servers that compiled the program once (``Engine.run_cases``):
    at most ``capacity`` at once, each case taking its turn in the fair scheduler, so a batch
    cannot crowd other callers out, and a case that times out holds its lane for its own
    timeout only.
    """
    state, tenant = _authorize(request)
    body = await _parse(request, BatchBody)
    _check_language(state, body.language)
    files, problems = decode_files(body.files)
    if problems:
        _unprocessable(problems)
    engine = cast(_FedEngine, state.engine)
    cases = [
        Case(
            stdin=_stdin(case.stdin),
            limits=_limits(state, case.run_timeout or body.run_timeout, body.memory_limit_MB),
        )
        for case in body.cases
    ]
    try:
        outcomes = await engine.run_cases(
            body.code,
            cases,
            files=files,
            queue_timeout=max(body.compile_timeout, MIN_QUEUE_WAIT),
            tenant=tenant,
            language=body.language,
            compile_timeout=body.compile_timeout,
        )
    except EngineClosed:
        return _busy("the server is stopping; try another replica or again later")
    except Exception:  # a broken sandbox is SandboxError for every case, never a 500
        logger.exception("run_code_batch failed")
        failed = sandbox_error("exception on running code (see the server log)")
        outcomes = []
        results = [{**failed, "passed": passed(failed, c.expected_stdout)} for c in body.cases]
    else:
        results = []
    for result, case in zip(outcomes, body.cases, strict=True):
        state.metrics.observe("run_code", result.outcome, result.elapsed_ms)
        if result.outcome == "busy":
            return _busy(result.message or "no worker is free; try again")
        answer = to_response(result, [], body.language)
        answer["passed"] = passed(answer, case.expected_stdout)
        results.append(answer)
    return json_response({"results": results})
