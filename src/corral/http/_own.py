"""corral's own endpoints: ``POST /v1/execute`` (the full result), ``/health``, ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from corral.http._errors import RETRY_AFTER, MappedRoute
from corral.http._metrics import CONTENT_TYPE
from corral.http._responses import json_response
from corral.http._sessions import not_found
from corral.http._state import caller_of, require_caller, state_of

__all__ = ["ExecuteRequest", "metrics_router", "router"]


class ExecuteRequest(BaseModel):
    """Run code once in a fresh worker, or in one of the caller's sessions."""

    model_config = ConfigDict(extra="forbid")

    code: str
    sessionId: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    """Seconds for the run (one-shot or in a session), at most the server's own timeout."""


router = APIRouter(route_class=MappedRoute)
"""Gateway mode: ``/v1/execute`` and ``/health``."""
metrics_router = APIRouter(route_class=MappedRoute)
"""Both modes: ``/metrics``."""


@router.post("/v1/execute", dependencies=[Depends(require_caller)])
async def execute(body: ExecuteRequest, request: Request) -> Response:
    """The full execution result of design.md §2; 503 with ``Retry-After`` when busy."""
    state, caller = state_of(request), caller_of(request)
    state.keyring.require_code_role(caller)
    limits = state.config.limits()
    if body.timeout is not None:
        limits = limits.replace(timeout=min(body.timeout, limits.timeout))
    if body.sessionId is not None:
        session = state.registry.lookup(caller.owner, body.sessionId)
        cancel = state.registry.cancel_event(caller.owner, body.sessionId)
        try:
            result = await session.run(body.code, limits=limits, cancel=cancel, tenant=caller.owner)
        except Exception:
            if state.registry.is_closed(caller.owner, session, body.sessionId):
                not_found(body.sessionId)
            raise
        if state.registry.is_closed(caller.owner, session, body.sessionId):
            not_found(body.sessionId)
    else:
        result = await state.engine.run(body.code, limits=limits, tenant=caller.owner)
    state.metrics.observe("execute", result.outcome, result.elapsed_ms)
    if result.outcome == "busy":
        return json_response(result.as_dict(), 503, headers={"Retry-After": RETRY_AFTER})
    return json_response(result.as_dict())


@router.get("/health")
async def health(request: Request) -> Response:
    """Healthy while the engine runs, with its load; 503 and the reason while it cannot run."""
    stats = state_of(request).engine.statistics()
    load = {
        "capacity": stats.capacity,
        "running": stats.running,
        "queued": stats.queued,
        "sessions": stats.sessions,
        "pool_ready": stats.pool_ready,
    }
    unavailable = getattr(stats, "unavailable", "")
    if unavailable:
        # Up, but unable to run code until the zygote is back: the balancer should look away.
        body = {"status": "UNHEALTHY", "reason": unavailable, **load}
        return json_response(body, 503, headers={"Retry-After": RETRY_AFTER})
    return json_response({"status": "HEALTHY", **load})


@metrics_router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE)
