"""E2B's control plane: create, connect, list, get_info, set_timeout and kill sandboxes.

Every call authenticates with ``X-API-Key``; a sandbox of another key is 404, exactly like a
sandbox that does not exist. Bodies are E2B's camelCase JSON; unknown fields are ignored, as
E2B's API ignores them, except those that ask for what corral cannot give.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.e2b._sandboxes import MAX_TIMEOUT, Sandbox, TooManySandboxes
from corral.e2b._service import ENVD_VERSION, fail, json_response, read_body, service_of

__all__ = ["DEFAULT_TEMPLATES", "routes"]

DEFAULT_TEMPLATES = ("code-interpreter-v1", "base")
"""The templates the SDKs ask for by default (code interpreter's, then the base SDK's): both
are corral's one sandbox."""
_DEFAULT_TIMEOUT = 300  # seconds, E2B's default lifetime
_MAX_METADATA = 64  # entries in metadata or envVars
_MAX_TEXT = 4096  # characters of one key or value
_CLIENT_ID = "corral"
_CPU_COUNT = 1
_BODY_BYTES = 1024 * 1024


def _texts(value: dict[str, str], what: str) -> dict[str, str]:
    if len(value) > _MAX_METADATA:
        fail(400, f"{what}: at most {_MAX_METADATA} entries")
    for key, item in value.items():
        if not key or len(key) > _MAX_TEXT or len(item) > _MAX_TEXT or "\0" in key + item:
            fail(400, f"{what}: keys must be 1 to {_MAX_TEXT} characters, values at most that")
    return value


class NewSandbox(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    templateID: str = Field(min_length=1, max_length=256)
    timeout: int = Field(default=_DEFAULT_TIMEOUT, ge=0, le=MAX_TIMEOUT)
    metadata: dict[str, str] | None = None
    envVars: dict[str, str] | None = None
    allow_internet_access: bool | None = None
    autoPause: bool | None = None


class Timeout(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int = Field(ge=0, le=MAX_TIMEOUT)


class ConnectBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int | None = Field(default=None, ge=0, le=MAX_TIMEOUT)


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def _created(sandbox: Sandbox) -> dict[str, Any]:
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": _CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.access_token,
    }


def _listed(sandbox: Sandbox) -> dict[str, Any]:
    limits = sandbox.session.limits
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": _CLIENT_ID,
        "startedAt": _time(sandbox.started_at),
        "endAt": _time(sandbox.end_at),
        "envdVersion": ENVD_VERSION,
        "cpuCount": _CPU_COUNT,
        "memoryMB": limits.memory_bytes // (1024 * 1024),
        "diskSizeMB": limits.work_bytes // (1024 * 1024),
        "state": "running",
        "metadata": sandbox.metadata,
    }


async def create(request: Request) -> Response:
    service = service_of(request)
    owner = service.owner(request)
    body = await read_body(request, NewSandbox, max_bytes=_BODY_BYTES)
    if body.templateID not in DEFAULT_TEMPLATES:
        fail(
            404,
            f"template '{body.templateID}' not found: corral serves one sandbox, "
            f"template '{DEFAULT_TEMPLATES[0]}'",
        )
    # allow_internet_access is accepted and has no effect (older SDKs send true by default):
    # corral's sandboxes never have a network; get_info says so.
    if body.autoPause:
        fail(400, "corral sandboxes cannot be paused: autoPause is not offered")
    try:
        sandbox = await service.sandboxes.create(
            owner,
            template=body.templateID,
            lifetime=body.timeout,
            metadata=_texts(body.metadata or {}, "metadata"),
            env_vars=_texts(body.envVars or {}, "envVars"),
        )
    except TooManySandboxes as exc:
        fail(429, str(exc))
    return json_response(_created(sandbox), 201)


async def _owned(request: Request) -> Sandbox:
    service = service_of(request)
    owner = service.owner(request)
    await service.sandboxes.sweep()
    sandbox_id = request.path_params["sandbox_id"]
    sandbox = service.sandboxes.owned(owner, sandbox_id)
    if sandbox is None:
        fail(404, f"sandbox '{sandbox_id}' not found")
    return sandbox


async def kill(request: Request) -> Response:
    sandbox = await _owned(request)
    await service_of(request).sandboxes.kill(sandbox)
    return Response(status_code=204)


async def set_timeout(request: Request) -> Response:
    sandbox = await _owned(request)
    body = await read_body(request, Timeout, max_bytes=_BODY_BYTES)
    sandbox.live_until(time.time() + body.timeout)
    return Response(status_code=204)


async def connect(request: Request) -> Response:
    sandbox = await _owned(request)
    body = await read_body(request, ConnectBody, max_bytes=_BODY_BYTES)
    if body.timeout is not None:
        # E2B's connect only ever extends a running sandbox's life.
        sandbox.live_until(max(sandbox.end_at, time.time() + body.timeout))
    return json_response(_created(sandbox), 200)


async def info(request: Request) -> Response:
    sandbox = await _owned(request)
    detail = _listed(sandbox)
    detail["envdAccessToken"] = sandbox.access_token
    detail["allowInternetAccess"] = False
    return json_response(detail)


async def listing(request: Request) -> Response:
    service = service_of(request)
    owner = service.owner(request)
    await service.sandboxes.sweep()
    wanted = _metadata_filter(request.query_params.get("metadata"))
    states = request.query_params.get("state")
    found = [
        _listed(s)
        for s in sorted(service.sandboxes.of_owner(owner), key=lambda s: s.started_at)
        if all(s.metadata.get(k) == v for k, v in wanted.items())
    ]
    if states is not None and "running" not in states.split(","):
        found = []  # corral's sandboxes are never paused
    return json_response(found)


def _metadata_filter(query: str | None) -> dict[str, str]:
    if not query:
        return {}
    return {unquote(k): unquote(v) for k, v in parse_qsl(query, keep_blank_values=True)}


async def unsupported(request: Request) -> Response:
    service_of(request).owner(request)
    fail(400, "corral sandboxes cannot be paused, resumed, forked or snapshotted")


routes = [
    Route("/sandboxes", create, methods=["POST"]),
    Route("/v2/sandboxes", create, methods=["POST"]),
    Route("/sandboxes", listing, methods=["GET"]),
    Route("/v2/sandboxes", listing, methods=["GET"]),
    Route("/sandboxes/{sandbox_id}", info, methods=["GET"]),
    Route("/sandboxes/{sandbox_id}", kill, methods=["DELETE"]),
    Route("/sandboxes/{sandbox_id}/timeout", set_timeout, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/connect", connect, methods=["POST"]),
    Route("/v2/sandboxes/{sandbox_id}/connect", connect, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/pause", unsupported, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/resume", unsupported, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/fork", unsupported, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/snapshots", unsupported, methods=["POST"]),
]
