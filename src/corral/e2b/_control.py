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

from corral.e2b._contexts import HOME
from corral.e2b._lifecycle import Lifecycle
from corral.e2b._network import NetworkOptions, NetworkUpdate, network_info, sandbox_network
from corral.e2b._pausing import info_extra, is_snapshot_id, pause_routes, resume_for
from corral.e2b._ports import port_fields, sandbox_domain
from corral.e2b._sandboxes import (
    MAX_TIMEOUT,
    SANDBOX_CPUS,
    Sandbox,
    TooManySandboxes,
)
from corral.e2b._service import ENVD_VERSION, E2BService, fail, json_response, read_body, service_of
from corral.e2b._templates import builds_of
from corral.errors import NetworkUnavailable, SnapshotError, SnapshotNotFound

__all__ = ["DEFAULT_TEMPLATES", "routes"]

DEFAULT_TEMPLATES = ("code-interpreter-v1", "base")
"""The templates the SDKs ask for by default (code interpreter's, then the base SDK's): both
are corral's one sandbox."""
_DEFAULT_TIMEOUT = 300  # seconds, E2B's default lifetime
_MAX_METADATA = 64  # entries in metadata or envVars
_MAX_TEXT = 4096  # characters of one key or value
_CLIENT_ID = "corral"
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
    network: NetworkOptions | None = None
    iam: dict[str, Any] | None = None
    autoPause: bool | None = None
    autoPauseMemory: bool | None = None
    autoResume: bool | dict[str, Any] | None = None
    """``{"enabled": bool}`` (the SDK sends this form), or a bare bool."""


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
        "cpuCount": SANDBOX_CPUS,
        "memoryMB": limits.memory_bytes // (1024 * 1024),
        "diskSizeMB": limits.work_bytes // (1024 * 1024),
        "state": "running" if sandbox.session.paused is None else "paused",
        "metadata": sandbox.metadata,
    }


def template_for(service: E2BService, owner: str, template_id: str) -> tuple[str, str]:
    """The corral template ``Sandbox.create(template=...)`` names ("" for E2B's defaults,
    which are corral's default runtime) and where its code starts; 404 naming it when the
    key may use none such."""
    if template_id in DEFAULT_TEMPLATES:
        return "", HOME
    name = template_id.partition(":")[0]
    builds = builds_of(service)
    found = None if builds is None else builds.store.find(name)
    if found is None or not found.usable_by(owner):
        fail(404, f"template '{template_id}' not found: build it with Template.build or "
                  f"corral template build, or use '{DEFAULT_TEMPLATES[0]}'")  # fmt: skip
    return name, f"{HOME}/{found.workdir}" if found.workdir else HOME


async def create(request: Request) -> Response:
    service = service_of(request)
    owner = service.owner(request)
    body = await read_body(request, NewSandbox, max_bytes=_BODY_BYTES)
    snapshot = body.templateID if is_snapshot_id(body.templateID) else None
    corral_template, cwd = ("", HOME) if snapshot else template_for(service, owner, body.templateID)
    network = sandbox_network(
        service.network,
        may_network=service.keys.may_network(owner),
        allow_internet_access=body.allow_internet_access,
        options=body.network,
    )
    if body.iam:
        fail(400, "iam is not served by corral: it has no workload identity to lend a sandbox")
    lifecycle = Lifecycle.parse(body.autoPause, body.autoPauseMemory, body.autoResume)
    try:
        sandbox = await service.sandboxes.create(
            owner,
            template=body.templateID,
            lifetime=body.timeout,
            metadata=_texts(body.metadata or {}, "metadata"),
            env_vars=_texts(body.envVars or {}, "envVars"),
            network=network,
            corral_template=corral_template,
            cwd=cwd,
            lifecycle=lifecycle,
            snapshot=snapshot,
            public=body.network is not None and bool(body.network.allowPublicTraffic),
        )
    except TooManySandboxes as exc:
        fail(429, str(exc))
    except SnapshotNotFound:
        fail(404, f"template '{body.templateID}' not found")
    except SnapshotError as exc:
        fail(409, str(exc))
    except NetworkUnavailable as exc:
        fail(503, str(exc))
    return json_response({**_created(sandbox), **_port_fields(request, sandbox)}, 201)


def _port_fields(request: Request, sandbox: Sandbox) -> dict[str, str]:
    service = service_of(request)
    domain = sandbox_domain(service.domain, request.headers.get("host"))
    return port_fields(sandbox.ports, domain)


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
    if sandbox.session.paused is not None:  # E2B's connect resumes a paused sandbox
        await resume_for(sandbox, body.timeout)
        return json_response(_created(sandbox), 201)
    if body.timeout is not None:
        # E2B's connect only ever extends a running sandbox's life.
        sandbox.live_until(max(sandbox.end_at, time.time() + body.timeout))
    return json_response({**_created(sandbox), **_port_fields(request, sandbox)}, 200)


async def resume(request: Request) -> Response:
    """The deprecated ``POST /sandboxes/{id}/resume`` (``connect`` is the SDK's way now)."""
    sandbox = await _owned(request)
    body = await read_body(request, ConnectBody, max_bytes=_BODY_BYTES)
    if sandbox.session.paused is None:
        fail(409, f"sandbox '{sandbox.id}' is already running")
    await resume_for(sandbox, body.timeout)
    return json_response(_created(sandbox), 201)


async def info(request: Request) -> Response:
    sandbox = await _owned(request)
    detail = _listed(sandbox)
    detail["envdAccessToken"] = sandbox.access_token
    policy = sandbox.session.network
    detail["allowInternetAccess"] = policy.enabled
    if policy.enabled:
        detail["network"] = network_info(policy)
    detail.update(info_extra(sandbox))
    return json_response(detail)


async def update_network(request: Request) -> Response:
    """E2B's ``update_network``: every egress rule replaced at once, new connections judged
    by the new ones."""
    service = service_of(request)
    sandbox = await _owned(request)
    body = await read_body(request, NetworkUpdate, max_bytes=_BODY_BYTES)
    policy = sandbox_network(
        service.network,
        may_network=service.keys.may_network(sandbox.owner),
        allow_internet_access=body.allow_internet_access,
        options=body,
    )
    try:
        await sandbox.session.update_network(policy)
    except NetworkUnavailable as exc:
        fail(503, str(exc))
    return Response(status_code=204)


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
    if states is not None:
        found = [s for s in found if s["state"] in states.split(",")]
    return json_response(found)


def _metadata_filter(query: str | None) -> dict[str, str]:
    if not query:
        return {}
    return {unquote(k): unquote(v) for k, v in parse_qsl(query, keep_blank_values=True)}


async def unsupported(request: Request) -> Response:
    service_of(request).owner(request)
    fail(400, "corral sandboxes cannot be forked: snapshot one and create from the snapshot")


def _seconds(request: Request, name: str) -> float | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        fail(400, f"{name} must be a Unix time in seconds")
    return float(value)


async def metrics(request: Request) -> Response:
    """``GET /sandboxes/{id}/metrics``: the owner's sandbox's samples (``_metrics``)."""
    sandbox = await _owned(request)
    start, end = _seconds(request, "start"), _seconds(request, "end")
    await sandbox.metrics.sample()
    kept = [
        s
        for s in sandbox.metrics.samples
        if (start is None or s.at >= start) and (end is None or s.at <= end + 1)
    ]
    total = sandbox.session.limits.memory_bytes
    return json_response([sandbox.metrics.as_e2b(s, total) for s in kept])


routes = [
    Route("/sandboxes", create, methods=["POST"]),
    Route("/v2/sandboxes", create, methods=["POST"]),
    Route("/sandboxes", listing, methods=["GET"]),
    Route("/v2/sandboxes", listing, methods=["GET"]),
    Route("/sandboxes/{sandbox_id}", info, methods=["GET"]),
    Route("/sandboxes/{sandbox_id}", kill, methods=["DELETE"]),
    Route("/sandboxes/{sandbox_id}/timeout", set_timeout, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/connect", connect, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/network", update_network, methods=["PUT"]),
    Route("/sandboxes/{sandbox_id}/metrics", metrics, methods=["GET"]),
    Route("/v2/sandboxes/{sandbox_id}/connect", connect, methods=["POST"]),
    *pause_routes,
    Route("/sandboxes/{sandbox_id}/resume", resume, methods=["POST"]),
    Route("/sandboxes/{sandbox_id}/fork", unsupported, methods=["POST"]),
]
