"""Container mode: a drop-in for DIAL's interpreter image, one process = one session.

``/health``, ``/execute_code``, ``/upload_file``, ``/download_file`` and ``/list_files`` with
the reference's bodies, statuses and check order (docs/dial.md §4), minus its flaws (§8): paths
are contained component-wise, links planted by user code are never followed (the engine's
session files), and an upload replaces its target only once it arrived whole and in bounds.
The session folder is the engine's; user code sees it as ``/mnt/data`` and requests name it
``MOUNT_FOLDER`` (default ``/mnt/data``, as in DIAL's image).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from corral.errors import (
    AccessDenied,
    FileTooLarge,
    InvalidPath,
    SessionDiskFull,
)
from corral.http._cancel import Hungup, until_hangup
from corral.http._docs import (
    ContainerHealth,
    Detail,
    DialExecuteResponse,
    DialFileResponse,
    DialFilesResponse,
    json_model,
    multipart_body,
)
from corral.http._engine_api import SessionAPI
from corral.http._errors import BUSY_TEXT, MappedRoute, fail
from corral.http._gateway import code_too_long
from corral.http._multipart import MultipartReader, content_type_of
from corral.http._paths import Resolved, bad_path, resolve
from corral.http._responses import file_response, json_response
from corral.http._sessions import listing_headers
from corral.http._state import State, state_of
from corral.http._transfers import access_denied, stream_upload

__all__ = ["router"]

_FIELD_PEEK = 64 * 1024  # bytes of a text field named "file" echoed back in the 422 body
_NOT_A_FILE = "Value error, Expected UploadFile, received: <class 'str'>"


class CodeRequest(BaseModel):
    code: str


class PathRequest(BaseModel):
    path: str


class ListRequest(BaseModel):
    comment: str | None = None


router = APIRouter(route_class=MappedRoute)


async def _session(state: State) -> SessionAPI:
    assert state.container is not None
    return await state.container.get()


def _check_session_header(state: State, request: Request) -> None:
    expected = state.config.session_id
    if expected is None:
        return
    value = request.headers.get("x-dial-session-id")
    if value is None:
        fail(400, "Missing x-dial-session-id header")
    if value != expected:
        fail(503, "Mismatching x-dial-session-id header")


def _resolve(state: State, path: str) -> Resolved:
    return resolve(path, str(state.config.mount_folder))


_DETAIL = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Detail"}}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": text, **_DETAIL}
    for status, text in (
        (400, "Bad path, missing or mismatching x-dial-session-id, code over the limit"),
        (403, "Permission denied: the code made a folder unreadable or unwritable"),
        (404, "File not found"),
        (413, "File too large"),
        (503, "Mismatching x-dial-session-id, or busy"),
    )
}
json_model(Detail)


@router.get("/health", response_model=ContainerHealth)
async def health(request: Request) -> Response:
    await _session(state_of(request))  # healthy only once executions can start
    return json_response({"status": "HEALTHY"})


@router.post("/execute_code", response_model=DialExecuteResponse, responses=_ERRORS)
async def execute_code(body: CodeRequest, request: Request) -> Response:
    state = state_of(request)
    _check_session_header(state, request)
    limit = state.config.limits().code_chars
    if len(body.code) > limit:
        fail(400, code_too_long(len(body.code), limit))
    session = await _session(state)
    result = await until_hangup(
        request.receive, lambda hangup: session.run(body.code, cancel=hangup)
    )
    if isinstance(result, Hungup):
        return Response()
    state.metrics.observe("execute_code", result.outcome, result.elapsed_ms)
    if result.outcome == "busy":
        fail(503, BUSY_TEXT, retry=True)
    return json_response(result.as_dial())


@router.post(
    "/download_file",
    response_class=Response,
    responses={
        200: {
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            }
        },
        **_ERRORS,
    },
)
async def download_file(body: PathRequest, request: Request) -> Response:
    state = state_of(request)
    _check_session_header(state, request)
    source = _resolve(state, body.path)
    if source.is_root:
        fail(404, f"File not found: {source.relative}")
    session = await _session(state)
    try:
        fd, size = await session.open_file(source.relative)
    except (InvalidPath, AccessDenied, FileNotFoundError):
        # A link (wherever it points), a folder, a FIFO or nothing: regular files only.
        fail(404, f"File not found: {source.relative}")
    return file_response(fd, size)


@router.post("/list_files", response_model=DialFilesResponse, responses=_ERRORS)
async def list_files(body: ListRequest, request: Request) -> Response:
    state = state_of(request)
    _check_session_header(state, request)
    try:
        files = await (await _session(state)).list_files(max_entries=state.config.list_max_entries)
    except AccessDenied:  # the code made its own folder unreadable
        access_denied(".")
    listing = {"files": [{"path": f.path, "size": f.size} for f in files]}
    return json_response(listing, headers=listing_headers(files))


def _invalid_file(kind: str, value: Any, message: str, **extra: Any) -> RequestValidationError:
    error = {"type": kind, "loc": ("body", "file"), "msg": message, "input": value, **extra}
    return RequestValidationError([error])


@router.post(
    "/upload_file",
    openapi_extra=multipart_body("the target path is this part's filename"),
    response_model=DialFileResponse,
    responses=_ERRORS,
)
async def upload_file(request: Request) -> Response:
    state = state_of(request)
    # Before reading the body, so an unauthenticated caller cannot stream a large file.
    _check_session_header(state, request)
    reader = MultipartReader.of(request)
    if reader is None:
        # FastAPI reads a url-encoded form as well, and any other body as an empty form.
        if content_type_of(request)[0] == "application/x-www-form-urlencoded":
            form = parse_qsl((await request.body()).decode("utf-8", "replace"), True)
            if any(name == "file" for name, _ in form):
                text = [value for name, value in form if name == "file"][-1]
                raise _invalid_file("value_error", text, _NOT_A_FILE, ctx={"error": {}})
        raise _invalid_file("missing", None, "Field required")
    part = await reader.next_part()
    while part is not None and part.name != "file":
        part = await reader.next_part()
    if reader.malformed:
        fail(400, "There was an error parsing the body")
    if part is None:
        raise _invalid_file("missing", None, "Field required")
    if part.filename is None:
        value = bytearray()
        async for chunk in reader.chunks():
            value += chunk[: _FIELD_PEEK - len(value)]
        text = value.decode("utf-8", "replace")
        raise _invalid_file("value_error", text, _NOT_A_FILE, ctx={"error": {}})
    if not part.filename:
        fail(400, "Missing path")
    target = _resolve(state, part.filename)
    if target.is_root:
        bad_path(target.absolute)
    data = stream_upload(
        reader.chunks(),
        state.config.upload_max_size,
        lambda: reader.malformed,
        "There was an error parsing the body",
    )
    session = await _session(state)
    try:
        info = await session.put_file(target.relative, data)
    except InvalidPath:
        bad_path(target.absolute)
    except AccessDenied:
        access_denied(target.relative)
    except (FileTooLarge, SessionDiskFull):
        fail(413, "File too large")
    return json_response({"path": target.relative, "size": info.size})
