"""E2B's template routes, as ``Template.build``, ``build_in_background``, ``get_build_status``
and ``exists`` call them.

``POST /v3/templates`` names the build (a template's id is its name); ``GET
/templates/{id}/files/{hash}`` answers whether the SDK must upload a COPY step's files, and
where (a URL of this server carrying a one-time token, ``PUT`` there); ``POST
/v2/templates/{id}/builds/{build}`` turns the steps into a corral ``TemplateSpec`` (or refuses
a step, 400 naming it) and starts the build, which queues behind any other build of this
server; ``GET /templates/{id}/builds/{build}/status`` answers its state and log from an
offset, at most ``_LOG_PAGE`` entries at a time; ``GET /templates/aliases/{alias}`` is 200
for a template the key may use, 403 for another key's, 404 for none.

A template built here belongs to the key that built it; the operator's (``corral template
build``) are every key's. Builds run in a sandbox of the engine (``corral.templates``).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.e2b._pausing import delete_snapshot, is_snapshot_id
from corral.e2b._service import fail, json_response, read_body, service_of
from corral.e2b._template_steps import BuildStart, TemplateStep, spec_from_e2b, upload_files
from corral.engine import BuildLog, build_network, build_template
from corral.errors import TemplateError
from corral.templates import (
    MAX_COPY_BYTES,
    CopyFile,
    TemplateSpec,
    TemplateStore,
    check_name,
)

__all__ = ["TemplateBuilds", "builds_of", "routes"]

_LOG_PAGE = 100  # entries per status answer, as E2B's API pages them
_MAX_BUILDS = 256  # records kept (the oldest finished ones go first)
_MAX_UPLOADS = 64  # archives waiting for their build, over all keys
_MAX_UPLOAD_BYTES = 4 * MAX_COPY_BYTES  # held in memory by all of them together
_BODY_BYTES = 4 * 1024 * 1024
Status = Literal["waiting", "building", "ready", "error"]


class _NewBuild(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, max_length=256)
    alias: str | None = Field(default=None, max_length=256)
    tags: list[str] | None = Field(default=None, max_length=16)


@dataclass(slots=True)
class _Build:
    build_id: str
    name: str
    owner: str
    log: BuildLog = field(default_factory=BuildLog)
    status: Status = "waiting"
    reason: str = ""
    step: int = -1
    created: float = field(default_factory=time.time)


@dataclass(slots=True)
class _Upload:
    owner: str
    token: str
    data: bytes | None = None


class TemplateBuilds:
    """The server's E2B builds and the archives uploaded for them; one build at a time."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._builds: dict[str, _Build] = {}
        self._uploads: dict[tuple[str, str], _Upload] = {}
        self._queue = anyio.Lock()

    @property
    def store(self) -> TemplateStore:
        store = self.engine.templates.store
        assert isinstance(store, TemplateStore)
        return store

    def new(self, name: str, owner: str) -> _Build:
        finished = [b for b in self._builds.values() if b.status in ("ready", "error")]
        while len(self._builds) >= _MAX_BUILDS and finished:
            self._builds.pop(finished.pop(0).build_id)
        if len(self._builds) >= _MAX_BUILDS:
            fail(429, "too many template builds are waiting; try again later")
        build = _Build(secrets.token_hex(8), name, owner)
        self._builds[build.build_id] = build
        return build

    def find(self, owner: str, name: str, build_id: str) -> _Build:
        build = self._builds.get(build_id)
        if build is None or build.owner != owner or build.name != name:
            fail(404, f"build {build_id} of template {name!r} not found")
        return build

    def upload_slot(self, owner: str, files_hash: str) -> _Upload:
        slot = self._uploads.get((owner, files_hash))
        if slot is None:
            # The oldest go first, so that a new archive always has room.
            while self._uploads and (
                len(self._uploads) >= _MAX_UPLOADS
                or self.held_bytes() > _MAX_UPLOAD_BYTES - MAX_COPY_BYTES
            ):
                self._uploads.pop(next(iter(self._uploads)))
            slot = self._uploads[(owner, files_hash)] = _Upload(owner, secrets.token_urlsafe(24))
        return slot

    def expected(self, files_hash: str, token: str) -> _Upload | None:
        """The slot waiting for this upload, if the token is its own."""
        for (_, found), slot in self._uploads.items():
            if found == files_hash and secrets.compare_digest(slot.token, token):
                return slot
        return None

    def held_bytes(self) -> int:
        return sum(len(s.data) for s in self._uploads.values() if s.data is not None)

    def files_for(self, owner: str) -> Any:
        def files(index: int, step: TemplateStep) -> list[CopyFile]:
            slot = self._uploads.get((owner, step.filesHash or ""))
            if slot is None or slot.data is None:
                raise TemplateError(f"step {index} (copy): its files were never uploaded")
            return upload_files(index, step.args, slot.data, MAX_COPY_BYTES)

        return files

    async def run(self, build: _Build, spec: TemplateSpec) -> None:
        async with self._queue:
            build.status = "building"
            engine = self.engine
            try:
                await build_template(
                    engine, self.store, build.name, spec, owner=build.owner, log=build.log,
                    network=build_network(engine, engine.packages.index_host),
                )  # fmt: skip
            except TemplateError as exc:
                build.status, build.reason = "error", str(exc)
                build.step = getattr(exc, "step", -1)
            except Exception as exc:  # noqa: BLE001 - the build's caller polls for the reason
                build.status, build.reason = "error", f"the build failed: {exc}"
                build.log.say(build.reason, level="error")
            else:
                build.status = "ready"


def builds_of(service: Any) -> TemplateBuilds | None:
    """The service's builds, made at first use (None: its engine has no templates)."""
    if service.templates is None and hasattr(service.sandboxes.engine, "templates"):
        service.templates = TemplateBuilds(service.sandboxes.engine)
    builds = service.templates
    return builds if isinstance(builds, TemplateBuilds) else None


def _builds(request: Request) -> TemplateBuilds:
    builds = builds_of(service_of(request))
    if builds is None:
        fail(404, "this server builds no templates")
    return builds


def _name(raw: str) -> str:
    """A template's name from E2B's ``name`` or ``name:tag`` (corral keeps one build)."""
    try:
        return check_name(raw.partition(":")[0])
    except TemplateError as exc:
        fail(400, str(exc))


async def request_build(request: Request) -> Response:
    """``POST /v3/templates``: a build id for a name."""
    owner = service_of(request).owner(request)
    builds = _builds(request)
    body = await read_body(request, _NewBuild, max_bytes=_BODY_BYTES)
    name = _name(body.name or body.alias or "")
    try:
        builds.store.check_owner(name, owner)
    except TemplateError as exc:
        fail(403, str(exc))
    build = builds.new(name, owner)
    tags = body.tags or ["default"]
    answer = {"templateID": name, "buildID": build.build_id, "public": False,
              "names": [name], "tags": tags, "aliases": [name]}  # fmt: skip
    return json_response(answer, 202)


async def file_link(request: Request) -> Response:
    """``GET /templates/{id}/files/{hash}``: present, or where to upload it."""
    owner = service_of(request).owner(request)
    builds = _builds(request)
    files_hash = request.path_params["files_hash"]
    if len(files_hash) > 128 or not files_hash.isalnum():
        fail(400, "a files hash is letters and digits")
    slot = builds.upload_slot(owner, files_hash)
    if slot.data is not None:
        return json_response({"present": True}, 201)
    base = str(request.base_url).rstrip("/")
    url = f"{base}/templates/uploads/{files_hash}/{slot.token}"
    return json_response({"present": False, "url": url}, 201)


async def upload(request: Request) -> Response:
    """``PUT /templates/uploads/{hash}/{token}``: the archive itself (the token is the key)."""
    builds = _builds(request)
    files_hash, token = request.path_params["files_hash"], request.path_params["token"]
    slot = builds.expected(files_hash, token)
    if slot is None:
        fail(404, "no upload is expected there")
    room = min(MAX_COPY_BYTES, _MAX_UPLOAD_BYTES - builds.held_bytes())
    data = bytearray()
    async for chunk in request.stream():
        data.extend(chunk)
        if len(data) > room:
            fail(413, f"an upload holds at most {room} bytes now")
    slot.data = bytes(data)
    return Response(status_code=200)


async def start_build(request: Request) -> Response:
    """``POST /v2/templates/{id}/builds/{build}``: check every step, then build in the
    background (400 naming a step corral cannot build)."""
    service = service_of(request)
    owner = service.owner(request)
    builds = _builds(request)
    build = builds.find(owner, request.path_params["template_id"], request.path_params["build_id"])
    if build.status != "waiting" or build.log.lines:
        fail(409, f"build {build.build_id} has started already")
    body = await read_body(request, BuildStart, max_bytes=_BODY_BYTES)
    try:
        spec = spec_from_e2b(body, builds.files_for(owner))
    except TemplateError as exc:
        build.status, build.reason = "error", str(exc)
        fail(400, str(exc))
    build.log.say(f"queued: {len(spec.steps)} steps on {spec.base}")
    builds.engine.spawn(lambda: builds.run(build, spec))
    return Response(status_code=202)


def _entry(line: Any) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(line.timestamp, UTC).isoformat().replace("+00:00", "Z")
    entry = {"timestamp": stamp, "level": line.level, "message": line.message}
    if line.step >= 0:
        entry["step"] = str(line.step + 1)
    return entry


async def build_status(request: Request) -> Response:
    """``GET /templates/{id}/builds/{build}/status?logsOffset=N``."""
    owner = service_of(request).owner(request)
    builds = _builds(request)
    build = builds.find(owner, request.path_params["template_id"], request.path_params["build_id"])
    raw = request.query_params.get("logsOffset", "0")
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        fail(400, "logsOffset must be a count")
    offset = int(raw)
    page = build.log.lines[offset : offset + _LOG_PAGE]
    answer: dict[str, Any] = {
        "templateID": build.name, "buildID": build.build_id, "status": build.status,
        "logs": [line.message for line in page], "logEntries": [_entry(x) for x in page],
    }  # fmt: skip
    if build.status == "error":
        tail = [_entry(x) for x in build.log.lines[-20:] if x.level == "error" or x.step >= 0]
        reason: dict[str, Any] = {"message": build.reason, "logEntries": tail}
        if build.step >= 0:
            reason["step"] = str(build.step + 1)
        answer["reason"] = reason
    return json_response(answer)


async def alias(request: Request) -> Response:
    """``GET /templates/aliases/{alias}``: 200 the key's (or the operator's), 403 another's."""
    owner = service_of(request).owner(request)
    builds = _builds(request)
    name = request.path_params["alias"].partition(":")[0]
    template = builds.store.find(name)
    if template is None:
        fail(404, f"template {name!r} not found")
    if not template.usable_by(owner):
        fail(403, f"template {name!r} belongs to another key")
    return json_response({"templateID": template.name, "public": template.owner == ""})


async def delete(request: Request) -> Response:
    """``DELETE /templates/{id}``: the key's own template goes (or its snapshot: the SDK's
    ``delete_snapshot`` takes the same route)."""
    if is_snapshot_id(request.path_params["template_id"]):
        return await delete_snapshot(request)
    owner = service_of(request).owner(request)
    builds = _builds(request)
    name = request.path_params["template_id"]
    template = builds.store.find(name)
    if template is None or template.owner != owner:
        fail(404, f"template {name!r} not found")
    await anyio.to_thread.run_sync(builds.store.remove, name, owner)
    return Response(status_code=204)


routes = [
    Route("/v3/templates", request_build, methods=["POST"]),
    Route("/templates/aliases/{alias}", alias, methods=["GET"]),
    Route("/templates/uploads/{files_hash}/{token}", upload, methods=["PUT"]),
    Route("/templates/{template_id}/files/{files_hash}", file_link, methods=["GET"]),
    Route("/v2/templates/{template_id}/builds/{build_id}", start_build, methods=["POST"]),
    Route("/templates/{template_id}/builds/{build_id}/status", build_status, methods=["GET"]),
    Route("/templates/{template_id}", delete, methods=["DELETE"]),
]
