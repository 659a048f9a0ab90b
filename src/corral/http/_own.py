"""corral's own endpoints: ``POST /v1/execute`` (the full result), ``/health``, ``/metrics``.

Every failure here is corral's one JSON shape, ``{"error": {"type", "message", "field"?}}``
(:class:`corral.http._errors.OwnRoute`), whatever the mode. The body is read as JSON whatever
its content type, as the DIAL routes do.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral._limits import Limits
from corral.engine import ExecutionResult
from corral.http._cancel import Hungup, until_hangup
from corral.http._docs import ErrorResponse, ExecuteResponse, HealthResponse, json_body
from corral.http._errors import RETRY_AFTER, ApiError, OwnRoute, describe_invalid
from corral.http._metrics import CONTENT_TYPE
from corral.http._network import NetworkRequest, sandbox_network
from corral.http._responses import json_response
from corral.http._state import State, caller_of, require_caller, state_of
from corral.http._stream import NDJSON, Listener, NdjsonRun
from corral.http._templates import check_template

__all__ = ["ExecuteRequest", "metrics_router", "render_result", "router"]


class ExecuteRequest(BaseModel):
    """Run code once in a fresh worker, or in one of the caller's sessions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    code: str
    """Python source; the value of a trailing expression becomes ``result``."""
    sessionId: str | None = None
    """Run in this open session (``/v1/ops/code_interpreter/open_session``); state persists."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds for this run, at most the server's own timeout."""
    stream: bool = False
    """Answer ``application/x-ndjson``: output lines while the code runs, then the result."""
    return_files: bool = False
    """Add each generated file's bytes (``content_base64``) within the file limits."""
    network: bool | NetworkRequest | None = None
    """What a one-shot run may reach: ``true`` (the server's whole ``[network] allow``) or
    ``{"allow": [...], "inject": {...}}``; nothing when absent. A session's is its own."""
    template: str | None = Field(default=None, min_length=1, max_length=128)
    """A template's name: the one-shot run's sandbox has its packages, files and env."""


router = APIRouter(route_class=OwnRoute)
"""Gateway mode: ``/v1/execute`` and ``/health``."""
metrics_router = APIRouter(route_class=OwnRoute)
"""Both modes: ``/metrics``."""

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (401, "Missing or unknown API key"),
        (403, "The key may not run code"),
        (404, "Session is not found"),
        (413, "Request body too large"),
        (422, "Invalid body; the message and `field` name the offending field"),
        (503, "Busy (`Retry-After`) or not available"),
    )
}


def render_result(result: ExecutionResult, *, return_files: bool = False) -> dict[str, Any]:
    """The full result of docs/design.md §2; with ``return_files``, each file's bytes (or null)."""
    body = result.as_dict()
    if return_files:
        for item in body["files"]:
            data = result.file_contents.get(item["path"])
            item["content_base64"] = None if data is None else base64.b64encode(data).decode()
    return body


def _parse(raw: bytes) -> ExecuteRequest:
    # json.loads, as FastAPI reads bodies: a lone surrogate in valid JSON reaches the engine,
    # which answers it as invalid_input, rather than reading as a JSON syntax error.
    try:
        data = json.loads(raw or b"null")
    except (ValueError, RecursionError) as exc:
        raise ApiError(422, f"the body is not valid JSON ({exc})") from None
    try:
        return ExecuteRequest.model_validate(data)
    except ValidationError as exc:
        message, field = describe_invalid(exc)
        raise ApiError(422, message, field=field) from None


def _limits(state: State, timeout: float | None) -> Limits:
    limits = state.config.limits()
    if timeout is not None:
        limits = limits.replace(timeout=min(timeout, limits.timeout))
    return limits


@router.post(
    "/v1/execute",
    dependencies=[Depends(require_caller)],
    openapi_extra=json_body(ExecuteRequest),
    response_model=ExecuteResponse,
    responses={
        200: {
            "description": "The full result; with `stream`, NDJSON lines ending in the result",
            "content": {NDJSON: {"schema": {"type": "string"}}},
        },
        **_ERRORS,
    },
)
async def execute(request: Request) -> Response:
    """Run code and answer the full execution result (docs/design.md §2).

    Busy answers 503 with ``Retry-After`` and the ``busy`` result. A closed connection cancels
    the run (outcome ``cancelled``).
    """
    state, caller = state_of(request), caller_of(request)
    state.keyring.require_code_role(caller)
    body = _parse(await request.body())
    limits = _limits(state, body.timeout)
    network = sandbox_network(state.network, caller, body.network)
    if network.enabled and body.sessionId is not None:
        message = "a session's network is the one it was opened with"
        raise ApiError(422, message, field="network")

    template = check_template(state.engine, caller.owner, body.template, body.sessionId)
    session, closed = None, None
    if body.sessionId is not None:  # looked up before a stream starts: a 404 is still a 404
        try:
            session = state.registry.lookup(caller.owner, body.sessionId)
        except StarletteHTTPException as exc:
            raise ApiError(exc.status_code, str(exc.detail), field="sessionId") from None
        closed = state.registry.cancel_event(caller.owner, body.sessionId)

    async def run(on_output: Listener | None, hangup: anyio.Event) -> ExecutionResult:
        if session is None or body.sessionId is None:
            return await state.engine.run(
                body.code,
                limits=limits,
                on_output=on_output,
                tenant=caller.owner,
                network=network,
                template=template,
            )
        registry, owner, session_id = state.registry, caller.owner, body.sessionId
        try:
            result = await session.run(
                body.code, limits=limits, cancel=hangup, on_output=on_output, tenant=owner
            )
        except Exception as exc:
            if registry.is_closed(owner, session, session_id):
                raise _gone(session_id) from exc
            raise
        if registry.is_closed(owner, session, session_id):
            raise _gone(session_id)
        return result

    def render(result: ExecutionResult) -> Mapping[str, Any]:
        state.metrics.observe("execute", result.outcome, result.elapsed_ms)
        return render_result(result, return_files=body.return_files)

    # A one-shot run is abandoned when its client hangs up; a session run is told to stop.
    one_shot = session is None
    if body.stream:
        return NdjsonRun(run, render, abandon=one_shot, also=closed)
    result = await until_hangup(
        request.receive, lambda hangup: run(None, hangup), abandon=one_shot, also=closed
    )
    if isinstance(result, Hungup):
        return Response()  # nobody is there to read it
    answer = render(result)
    if result.outcome == "busy":
        return json_response(answer, 503, headers={"Retry-After": RETRY_AFTER})
    return json_response(answer)


def _gone(session_id: str) -> ApiError:
    return ApiError(404, f"Session is not found: {session_id}", field="sessionId")


@router.get(
    "/health",
    response_model=HealthResponse,
    responses={503: {"model": HealthResponse, "description": "Up, but unable to run code now"}},
)
async def health(request: Request) -> Response:
    """Healthy while the engine runs, with its load; 503 and the reason while it cannot run."""
    stats = state_of(request).engine.statistics()
    load = {
        "capacity": stats.capacity,
        "running": stats.running,
        "session_runs": stats.scheduler.session_runs,
        "queued": stats.queued,
        "sessions": stats.sessions,
        "pool_ready": stats.pool_ready,
        "background_processes": sum(stats.background_by_tenant.values()),
        "cpu_seconds": round(sum(stats.cpu_seconds_by_tenant.values()), 3),
        "cgroups": stats.cgroups,
    }
    unavailable = getattr(stats, "unavailable", "")
    if unavailable:
        # Up, but unable to run code until the zygote is back: the balancer should look away.
        body = {"status": "UNHEALTHY", "reason": unavailable, **load}
        return json_response(body, 503, headers={"Retry-After": RETRY_AFTER})
    return json_response({"status": "HEALTHY", **load})


@metrics_router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE)
