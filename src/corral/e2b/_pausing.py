"""E2B's pause, resume and snapshot routes (the SDK's ``pause``, ``connect``, ``create_snapshot``,
``list_snapshots``, ``delete_snapshot``).

Every call authenticates with ``X-API-Key``; another key's sandbox or snapshot is 404, exactly
like one that does not exist. A snapshot's id is a template id: ``Sandbox.create(snapshot_id)``
starts a new sandbox from it, its own copy (the source runs on).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.e2b import _lifecycle
from corral.e2b._sandboxes import Sandbox
from corral.e2b._service import fail, json_response, read_body, service_of
from corral.engine import SnapshotMeta
from corral.errors import SessionClosed, SnapshotError

__all__ = [
    "EXTRA_PATHS",
    "delete_snapshot",
    "info_extra",
    "is_snapshot_id",
    "pause_routes",
    "resume_for",
]

EXTRA_PATHS = re.compile(r"/(snapshots|templates/snap_[0-9a-f]{1,64})/?$")
"""Control-plane paths beyond ``/sandboxes`` that are E2B's: snapshot listing and deletion."""
_SNAPSHOT = re.compile(r"snap_[0-9a-f]{32}")
_DEFAULT_TIMEOUT = 300  # seconds, E2B's default lifetime (a resumed sandbox's too)
_BODY_BYTES = 64 * 1024
_MAX_PAGE = 100


def is_snapshot_id(template_id: str) -> bool:
    return _SNAPSHOT.fullmatch(template_id) is not None


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    memory: bool | None = None
    """False: a filesystem pause; true or absent: full."""


class SnapshotBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, max_length=256)
    memory: bool | None = None


async def _owned(request: Request) -> Sandbox:
    service = service_of(request)
    owner = service.owner(request)
    await service.sandboxes.sweep()
    sandbox_id = request.path_params["sandbox_id"]
    sandbox = service.sandboxes.owned(owner, sandbox_id)
    if sandbox is None:
        fail(404, f"sandbox '{sandbox_id}' not found")
    return sandbox


def info_extra(sandbox: Sandbox) -> dict[str, Any]:
    """``get_info``'s lifecycle, pause mode, and what a full pause could not keep (as
    metadata, where the SDK shows it: ``corral.lost`` names them)."""
    session = sandbox.session
    extra: dict[str, Any] = {"lifecycle": sandbox.lifecycle.as_e2b()}
    if session.paused is not None:
        extra["pauseMode"] = session.paused
    lost = session.pause_state.lost
    if lost:
        extra["metadata"] = {**sandbox.metadata, "corral.lost": ",".join(sorted(lost))[:4096]}
    return extra


async def resume_for(sandbox: Sandbox, lifetime: int | None) -> None:
    """Resume a paused sandbox for ``lifetime`` seconds (E2B's default when None).

    Raises:
        E2BError: 404 when it is gone, 409 when its state cannot be restored.
    """
    try:
        await _lifecycle.resume(sandbox, _DEFAULT_TIMEOUT if lifetime is None else lifetime)
    except SessionClosed:
        fail(404, f"sandbox '{sandbox.id}' not found")
    except SnapshotError as exc:
        fail(409, f"sandbox '{sandbox.id}' cannot be resumed: {exc}")


async def pause(request: Request) -> Response:
    sandbox = await _owned(request)
    body = await read_body(request, PauseBody, max_bytes=_BODY_BYTES)
    try:
        paused = await _lifecycle.pause(sandbox, "filesystem" if body.memory is False else "full")
    except SnapshotError as exc:
        fail(409, f"sandbox '{sandbox.id}' could not be paused: {exc}")
    if not paused:
        fail(409, f"sandbox '{sandbox.id}' is already paused")
    return Response(status_code=204)


async def create_snapshot(request: Request) -> Response:
    sandbox = await _owned(request)
    body = await read_body(request, SnapshotBody, max_bytes=_BODY_BYTES)
    try:
        meta = await sandbox.session.snapshot(
            "filesystem" if body.memory is False else "full", name=body.name or ""
        )
    except SnapshotError as exc:
        fail(409, f"sandbox '{sandbox.id}' could not be snapshotted: {exc}")
    except SessionClosed:
        fail(404, f"sandbox '{sandbox.id}' not found")
    return json_response(_snapshot_info(meta.id, meta.name), 201)


def _snapshot_info(snapshot_id: str, name: str) -> dict[str, Any]:
    return {"snapshotID": snapshot_id, "names": [name] if name else [snapshot_id]}


async def list_snapshots(request: Request) -> Response:
    """The key's snapshots, oldest first; ``sandboxID`` and ``name`` filter, ``limit`` and
    ``nextToken`` page (the token is the last id of the page before)."""
    service = service_of(request)
    owner = service.owner(request)
    query = request.query_params
    source, name = query.get("sandboxID"), query.get("name")
    limit_text = query.get("limit", str(_MAX_PAGE))
    if not limit_text.isascii() or not limit_text.isdigit() or not 0 < int(limit_text) <= 1000:
        fail(400, "limit must be 1 to 1000")
    limit = int(limit_text)
    metas = [
        m for m in service.sandboxes.snapshots(owner)
        if (source is None or _source(m) == source) and (name is None or name in (m.name, m.id))
    ]  # fmt: skip
    token = query.get("nextToken")
    if token:
        ids = [m.id for m in metas]
        metas = metas[ids.index(token) + 1 :] if token in ids else []
    page = metas[:limit]
    headers = {"x-next-token": page[-1].id} if len(metas) > limit and page else {}
    response = json_response([_snapshot_info(m.id, m.name) for m in page])
    response.headers.update(headers)
    return response


async def delete_snapshot(request: Request) -> Response:
    service = service_of(request)
    owner = service.owner(request)
    snapshot_id = request.path_params["template_id"]
    if not service.sandboxes.delete_snapshot(snapshot_id, owner):
        fail(404, f"template '{snapshot_id}' not found")
    return Response(status_code=204)


def _source(meta: SnapshotMeta) -> str | None:
    """The sandbox a snapshot was taken of (its session's label says)."""
    try:
        fields = json.loads(meta.labels.get(_lifecycle.LABEL, "{}"))
    except ValueError:
        return None
    found = fields.get("id") if isinstance(fields, dict) else None
    return found if isinstance(found, str) else None


pause_routes = [
    Route("/sandboxes/{sandbox_id}/pause", pause, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/snapshots", create_snapshot, methods=["POST"]),
    Route("/snapshots", list_snapshots, methods=["GET"]),
]
