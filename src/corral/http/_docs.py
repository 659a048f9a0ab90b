"""API docs served by corral: ``/openapi.json`` with every body's schema, ``/docs``, ``/redoc``.

Handlers that read their body themselves (DIAL's strict parsing, JSON without a content type)
name its model with :func:`json_body`; :func:`install_docs` adds those models to the
components, the ``Api-Key`` and bearer security schemes, and the two pages. Their scripts and
styles come from the ``fastapi-offline`` package's copy of Swagger UI and ReDoc, served from
``/docs/assets``: no CDN, so an air-gapped deployment has its docs too.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict

__all__ = [
    "BucketResponse",
    "ContainerHealth",
    "Detail",
    "DialExecuteResponse",
    "DialFileResponse",
    "DialFilesResponse",
    "DialSessionResponse",
    "ErrorResponse",
    "ExecuteResponse",
    "FileMetadata",
    "HealthResponse",
    "install_docs",
    "json_body",
    "json_model",
    "multipart_body",
    "plain_errors",
]

ASSETS = "/docs/assets"
_REF = "#/components/schemas/{model}"
_BODY_MODELS: dict[str, type[BaseModel]] = {}
_OPEN_PATHS = ("/health", "/metrics", "/openapi.json", "/docs", "/redoc", "/")
"""Served without a key."""

MimeBundleSchema = dict[str, Any]


class ErrorDetail(BaseModel):
    type: str
    """``invalid_request``, ``unauthorized``, ``forbidden``, ``not_found``, ``busy``, ..."""
    message: str
    """One sentence; names the offending field when there is one."""
    field: str | None = None
    """The offending field's dotted path, when the error is about one."""


class ErrorResponse(BaseModel):
    """corral's own routes: every error."""

    error: ErrorDetail


class FileOut(BaseModel):
    path: str
    size: int
    sha256: str
    content_base64: str | None = None
    """Only with ``return_files``: the bytes, or null past the returned-bytes limit."""


class ErrorInfoOut(BaseModel):
    type: str
    message: str
    traceback: str


class InputOut(BaseModel):
    id: str
    sha256: str
    original_sha256: str | None = None


class EvidenceOut(BaseModel):
    code_sha256: str
    runtime: str
    inputs: list[InputOut]
    limits: dict[str, float]
    isolation: str


class OmittedOut(BaseModel):
    stdout: int
    stderr: int
    result: int


class ExecuteResponse(BaseModel):
    """The full execution result (docs/design.md §2)."""

    status: Literal["SUCCESS", "FAILURE"]
    outcome: str
    stdout: str
    stderr: str
    result: MimeBundleSchema | Literal[""]
    display: list[MimeBundleSchema]
    files: list[FileOut]
    omitted: OmittedOut
    error: ErrorInfoOut | None
    message: str
    restarted: bool
    elapsed_ms: float
    queued_ms: float
    cpu_ms: float | None
    peak_rss_kb: int | None
    evidence: EvidenceOut | None


class HealthResponse(BaseModel):
    status: Literal["HEALTHY", "UNHEALTHY"]
    reason: str | None = None
    """Why the server cannot run code now (``UNHEALTHY``, answered with 503)."""
    capacity: int
    running: int
    """One-shot runs and cases holding a capacity slot now."""
    session_runs: int = 0
    """Runs going in sessions with a cgroup of their own: they take no slot."""
    queued: int
    sessions: int
    pool_ready: int


class DialExecuteResponse(BaseModel):
    """DIAL's execute result: exactly these five fields (docs/dial.md §2.2)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["SUCCESS", "FAILURE"]
    stdout: str
    stderr: str
    result: MimeBundleSchema | Literal[""]
    display: list[MimeBundleSchema]


class DialSessionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sessionId: str


class DialFileResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    size: int


class DialFilesResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: list[DialFileResponse]


class ContainerHealth(BaseModel):
    status: Literal["HEALTHY"]


class Detail(BaseModel):
    """The interpreter container's errors (docs/dial.md §4.2)."""

    detail: str


class BucketResponse(BaseModel):
    bucket: str


class FileMetadata(BaseModel):
    """DIAL's ``FileMetadata`` (docs/dial.md §6)."""

    name: str
    parentPath: str | None
    bucket: str
    url: str
    nodeType: Literal["ITEM"]
    resourceType: Literal["FILE"]
    createdAt: int
    updatedAt: int
    etag: str
    contentLength: int
    contentType: str


def json_model(model: type[BaseModel]) -> type[BaseModel]:
    """Add ``model`` to the components (for a response described by ``$ref``)."""
    _BODY_MODELS[model.__name__] = model
    return model


def json_body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a route that parses a JSON ``model`` itself."""
    _BODY_MODELS[model.__name__] = model
    schema = {"$ref": _REF.format(model=model.__name__)}
    return {
        "requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}
    }


def multipart_body(description: str) -> dict[str, Any]:
    """``openapi_extra`` for a multipart upload whose file part's filename is the target."""
    schema = {
        "type": "object",
        "properties": {"file": {"type": "string", "format": "binary", "description": description}},
        "required": ["file"],
    }
    return {
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}
    }


def plain_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses`` for DIAL's plain-text errors."""
    text = {"content": {"text/plain": {"schema": {"type": "string"}}}}
    return {status: {"description": "DIAL's plain-text error", **text} for status in statuses}


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for name, model in _BODY_MODELS.items():
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    spec["components"]["securitySchemes"] = {
        "ApiKey": {"type": "apiKey", "in": "header", "name": "Api-Key"},
        "Bearer": {"type": "http", "scheme": "bearer"},
    }
    gateway = getattr(app.state, "corral_gateway", False)
    for path, operations in spec.get("paths", {}).items():
        if not gateway or path in _OPEN_PATHS:
            continue
        for operation in operations.values():
            operation["security"] = [{"ApiKey": []}, {"Bearer": []}]
            operation.setdefault("responses", {}).setdefault(
                "401", {"description": "Missing or unknown API key"}
            )
    app.openapi_schema = spec
    return spec


def install_docs(app: FastAPI, *, gateway: bool) -> None:
    """``/openapi.json`` with schemas and security, ``/docs`` and ``/redoc`` on local assets."""
    app.state.corral_gateway = gateway
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    static = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(static)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} API",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
