"""corral's own pause routes for DIAL sessions: ``POST /v1/sessions/{id}/pause|resume|snapshot``.

``{id}`` is the caller's DIAL ``sessionId`` (its key's scope, as on every DIAL route): another
key's session is 404. A paused session also resumes on its next DIAL operation; these routes
say how it was paused, what a full pause could not keep, and take snapshots, which
``/v1/ops/code_interpreter/open_session`` with ``"snapshot": id`` (corral's extension) and
the engine's ``open_session(snapshot=...)`` start sessions from.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.errors import SessionClosed, SnapshotError
from corral.http._docs import ErrorResponse, json_body
from corral.http._engine_api import SessionAPI
from corral.http._errors import ApiError, OwnRoute, describe_invalid
from corral.http._responses import json_response
from corral.http._state import caller_of, require_caller, state_of

__all__ = ["router"]

router = APIRouter(route_class=OwnRoute)
_BODY_BYTES = 64 * 1024
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (403, "The key may not run code"),
        (404, "Session is not found (or is another key's)"),
        (409, "Its state could not be kept or restored; the message says why"),
        (422, "Invalid body; the message and `field` name the offending field"),
    )
}


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Literal["full", "filesystem"] = "full"
    """``full``: frozen where it is, everything kept; ``filesystem``: files only."""


class SnapshotRequest(PauseRequest):
    name: str = Field(default="", max_length=256)


class PauseAnswer(BaseModel):
    sessionId: str
    state: Literal["running", "paused"]
    mode: Literal["full", "filesystem"] | None
    lost: dict[str, str]
    """Globals a full pause to disk (or a restart) could not keep, and why."""


class SnapshotAnswer(BaseModel):
    snapshotId: str
    mode: Literal["full", "filesystem"]
    name: str
    lost: dict[str, str]


async def _body(request: Request, model: type[PauseRequest]) -> Any:
    raw = await request.body()
    if len(raw) > _BODY_BYTES:
        raise ApiError(413, "the body is too large")
    try:
        return model.model_validate(json.loads(raw or b"{}"))
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            message, field = describe_invalid(exc)
            raise ApiError(422, message, field=field) from None
        raise ApiError(422, "the body is not valid JSON") from None


def _session(request: Request, session_id: str) -> SessionAPI:
    state, caller = state_of(request), caller_of(request)
    state.keyring.require_code_role(caller)
    return state.registry.lookup(caller.owner, session_id)


@contextlib.contextmanager
def _answered(session_id: str) -> Iterator[None]:
    """A session gone meanwhile is 404; state that could not be kept or restored, 409
    saying why (where the shared mapping would only say it cannot be resumed)."""
    try:
        yield
    except SessionClosed:
        raise ApiError(404, f"Session is not found: {session_id}") from None
    except SnapshotError as exc:
        raise ApiError(409, str(exc)) from None


def _described(session_id: str, session: SessionAPI) -> dict[str, Any]:
    paused = session.paused
    state = getattr(session, "pause_state", None)
    lost = {} if state is None else dict(state.lost)
    return {
        "sessionId": session_id,
        "state": "running" if paused is None else "paused",
        "mode": paused,
        "lost": lost,
    }


@router.post(
    "/v1/sessions/{session_id:path}/pause",
    dependencies=[Depends(require_caller)],
    openapi_extra=json_body(PauseRequest, required=False),
    response_model=PauseAnswer,
    responses=_ERRORS,
)
async def pause(request: Request, session_id: str) -> Response:
    """Pause the caller's session: ``full`` freezes it (no CPU, no slot), ``filesystem``
    keeps its files and ends its processes; its next operation resumes it."""
    session = _session(request, session_id)
    body = await _body(request, PauseRequest)
    with _answered(session_id):
        await session.pause(body.mode)
    return json_response(_described(session_id, session))


@router.post(
    "/v1/sessions/{session_id:path}/resume",
    dependencies=[Depends(require_caller)],
    openapi_extra=json_body(PauseRequest, required=False),
    response_model=PauseAnswer,
    responses=_ERRORS,
)
async def resume(request: Request, session_id: str) -> Response:
    """Resume the caller's paused session (nothing if it runs); ``lost`` names the globals
    a full pause to disk could not keep."""
    session = _session(request, session_id)
    with _answered(session_id):
        await session.resume()
    return json_response(_described(session_id, session))


@router.post(
    "/v1/sessions/{session_id:path}/snapshot",
    dependencies=[Depends(require_caller)],
    openapi_extra=json_body(SnapshotRequest, required=False),
    response_model=SnapshotAnswer,
    responses=_ERRORS,
)
async def snapshot(request: Request, session_id: str) -> Response:
    """Keep the caller's session as a snapshot (it runs on); answers its id."""
    session = _session(request, session_id)
    body = await _body(request, SnapshotRequest)
    with _answered(session_id):
        meta = await session.snapshot(body.mode, name=body.name)
    return json_response(
        {"snapshotId": meta.id, "mode": meta.mode, "name": meta.name, "lost": dict(meta.lost)}
    )
