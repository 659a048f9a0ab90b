"""DIAL Core's nine ``/v1/ops/code_interpreter/*`` operations (docs/dial.md §5).

Every operation authenticates first (401), then applies DIAL Core's checks in DIAL Core's
order. Bodies are exactly DIAL's fields; corral's richer result stays on ``/v1/execute``.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request, Response

from corral.engine import ExecutionResult
from corral.errors import (
    AccessDenied,
    SessionClosed,
    SessionNotFound,
    SnapshotError,
    SnapshotNotFound,
)
from corral.http._auth import Caller
from corral.http._cancel import Hungup, until_hangup
from corral.http._docs import (
    DialExecuteResponse,
    DialFileResponse,
    DialFilesResponse,
    DialSessionResponse,
    json_body,
    multipart_body,
    plain_errors,
)
from corral.http._engine_api import SessionAPI
from corral.http._errors import BUSY_TEXT, MappedRoute, fail
from corral.http._files_api import file_metadata
from corral.http._models import (
    DownloadBody,
    ExecuteBody,
    OpenSessionBody,
    SessionBody,
    TransferInBody,
    TransferOutBody,
    parse_body,
)
from corral.http._multipart import MultipartReader
from corral.http._network import sandbox_network
from corral.http._responses import file_response, json_response
from corral.http._sessions import listing_headers, not_found
from corral.http._state import State, caller_of, require_caller, state_of
from corral.http._templates import check_template
from corral.http._transfers import (
    access_denied,
    check_file_path,
    check_output,
    open_in_session,
    prepare_input,
    resolve_upload_target,
    stream_upload,
    transfer_input,
    upload_into_session,
    write_output,
)

__all__ = ["code_too_long", "router"]

router = APIRouter(
    prefix="/v1/ops/code_interpreter",
    route_class=MappedRoute,
    dependencies=[Depends(require_caller)],
)


_BYTES: dict[str, Any] = {
    "description": "The file's bytes",
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}
_METADATA: dict[str, Any] = {
    "description": "DIAL's FileMetadata of the stored file",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileMetadata"}}},
}


def code_too_long(length: int, limit: int) -> str:
    """DIAL's ``execute_code`` refusing code over the limit, naming the field and the limit."""
    return f"Field 'code' is too long: {length} characters, the limit (code_chars) is {limit}"


def _context(request: Request) -> tuple[State, Caller]:
    return state_of(request), caller_of(request)


def _session_id(
    body: SessionBody | DownloadBody | ExecuteBody | TransferInBody | TransferOutBody,
) -> str:
    if body.sessionId is None:
        fail(400, "Missing sessionId")
    return body.sessionId


@router.post(
    "/open_session",
    openapi_extra=json_body(OpenSessionBody),
    responses={
        200: {"model": DialSessionResponse},
        **plain_errors(400, 403, 404, 409, 422, 429, 503),
    },
)
async def open_session(request: Request) -> Response:
    state, caller = _context(request)
    state.keyring.require_code_role(caller)
    body = await parse_body(request, OpenSessionBody)
    network = sandbox_network(state.network, caller, body.network)
    template = check_template(state.engine, caller.owner, body.template)
    try:
        session_id = await state.registry.open(
            caller.owner, body.sessionId, network=network, template=template,
            snapshot=body.snapshot,
        )  # fmt: skip
    except SnapshotNotFound:
        fail(404, f"Snapshot is not found: {body.snapshot}")
    except SnapshotError as exc:
        fail(409, f"Snapshot cannot be used: {body.snapshot}", explain=str(exc))
    return json_response({"sessionId": session_id})


@router.post(
    "/get_session",
    openapi_extra=json_body(SessionBody),
    responses={200: {"model": DialSessionResponse}, **plain_errors(400, 404, 503)},
)
async def get_session(request: Request) -> Response:
    state, caller = _context(request)
    session_id = _session_id(await parse_body(request, SessionBody))
    state.registry.lookup(caller.owner, session_id)  # no touch: DIAL's get_session keeps TTL
    return json_response({"sessionId": session_id})


@router.post(
    "/close_session",
    openapi_extra=json_body(SessionBody),
    responses={200: {"model": DialSessionResponse}, **plain_errors(400, 404, 503)},
)
async def close_session(request: Request) -> Response:
    state, caller = _context(request)
    session_id = _session_id(await parse_body(request, SessionBody))
    await state.registry.close(caller.owner, session_id)
    return json_response({"sessionId": session_id})


@router.post(
    "/list_files",
    openapi_extra=json_body(SessionBody),
    responses={200: {"model": DialFilesResponse}, **plain_errors(400, 404, 503)},
)
async def list_files(request: Request) -> Response:
    state, caller = _context(request)
    session_id = _session_id(await parse_body(request, SessionBody))
    session = state.registry.lookup(caller.owner, session_id)
    try:
        files = await session.list_files(max_entries=state.config.list_max_entries)
    except (SessionNotFound, SessionClosed):
        not_found(session_id)
    except AccessDenied:  # the code made its own folder unreadable
        access_denied(".")
    body = {"files": [{"path": f.path, "size": f.size} for f in files]}
    return json_response(body, headers=listing_headers(files))


@router.post(
    "/download_file",
    response_class=Response,
    openapi_extra=json_body(DownloadBody),
    responses={200: _BYTES, **plain_errors(400, 404, 503)},
)
async def download_file(request: Request) -> Response:
    state, caller = _context(request)
    body = await parse_body(request, DownloadBody)
    session_id = _session_id(body)
    path = check_file_path(body.path)
    session = state.registry.lookup(caller.owner, session_id)
    try:
        fd, size = await open_in_session(session, path)
    except (SessionNotFound, SessionClosed):
        not_found(session_id)
    return file_response(fd, size)


@router.post(
    "/upload_file",
    openapi_extra=multipart_body("the target path is this part's filename"),
    responses={200: {"model": DialFileResponse}, **plain_errors(400, 404, 413, 503)},
)
async def upload_file(request: Request) -> Response:
    state, caller = _context(request)
    session_id = request.query_params.get("session_id")
    if session_id is None:
        fail(400, "Missing session_id query param")
    reader = MultipartReader.of(request)
    part = None if reader is None else await reader.next_part()
    while reader is not None and part is not None and part.filename is None:
        part = await reader.next_part()
    if reader is None or part is None or part.filename is None:
        fail(400, "Missing filename in multipart upload")
    path = check_file_path(part.filename)
    session = state.registry.lookup(caller.owner, session_id)
    target = resolve_upload_target(path)
    data = stream_upload(
        reader.chunks(),
        state.config.upload_max_size,
        lambda: reader.malformed,
        "Missing filename in multipart upload",
    )
    try:
        size = await upload_into_session(session, target, data)
    except (SessionNotFound, SessionClosed):
        not_found(session_id)
    return json_response({"path": target.relative, "size": size})


@router.post(
    "/transfer_input_file",
    openapi_extra=json_body(TransferInBody),
    responses={200: {"model": DialFileResponse}, **plain_errors(400, 403, 404, 413, 503)},
)
async def transfer_input_file(request: Request) -> Response:
    state, caller = _context(request)
    body = await parse_body(request, TransferInBody)
    session_id = _session_id(body)
    target_path, stored = await prepare_input(state, caller, body)
    session = state.registry.lookup(caller.owner, session_id)
    try:
        size = await transfer_input(state, session, target_path, stored)
    except (SessionNotFound, SessionClosed):
        not_found(session_id)
    return json_response({"path": resolve_upload_target(target_path).relative, "size": size})


@router.post(
    "/transfer_output_file",
    response_class=Response,
    openapi_extra=json_body(TransferOutBody),
    responses={200: _METADATA, **plain_errors(400, 403, 404, 503)},
)
async def transfer_output_file(request: Request) -> Response:
    state, caller = _context(request)
    body = await parse_body(request, TransferOutBody)
    session_id = _session_id(body)
    source_path, target = check_output(caller, body)
    session = state.registry.lookup(caller.owner, session_id)
    try:
        stored = await write_output(state, session, source_path, target)
    except (SessionNotFound, SessionClosed):
        not_found(session_id)
    return json_response(file_metadata(stored))


@router.post(
    "/execute_code",
    openapi_extra=json_body(ExecuteBody),
    responses={200: {"model": DialExecuteResponse}, **plain_errors(400, 403, 404, 503)},
)
async def execute_code(request: Request) -> Response:
    state, caller = _context(request)
    state.keyring.require_code_role(caller)
    body = await parse_body(request, ExecuteBody)
    if body.code is None:
        fail(400, "Missing code")
    limit = state.config.limits().code_chars
    if len(body.code) > limit:
        fail(400, code_too_long(len(body.code), limit))
    code = body.code
    if body.sessionId is None and not body.inputFiles and not body.outputFiles:
        # No files to move: a one-shot worker is a temporary session that costs less.
        ran = await until_hangup(
            request.receive, lambda _: state.engine.run(code, tenant=caller.owner), abandon=True
        )
        return Response() if isinstance(ran, Hungup) else _answer(state, ran)
    if body.sessionId is None:
        async with state.registry.temporary(caller.owner) as temporary:
            return _answered(
                await until_hangup(
                    request.receive, lambda hangup: _execute(state, caller, temporary, body, hangup)
                )
            )
    session = state.registry.lookup(caller.owner, body.sessionId)
    closed = state.registry.cancel_event(caller.owner, body.sessionId)
    try:
        response = _answered(
            await until_hangup(
                request.receive,
                lambda hangup: _execute(state, caller, session, body, hangup),
                also=closed,
            )
        )
    except Exception:
        if state.registry.is_closed(caller.owner, session, body.sessionId):
            not_found(body.sessionId)  # closed under the run, however the run ended
        raise
    if state.registry.is_closed(caller.owner, session, body.sessionId):
        not_found(body.sessionId)  # closed while it ran: the run was cancelled
    return response


async def _execute(
    state: State,
    caller: Caller,
    session: SessionAPI,
    body: ExecuteBody,
    cancel: anyio.Event | None = None,
) -> Response:
    assert body.code is not None
    for item in body.inputFiles or ():
        target_path, stored = await prepare_input(state, caller, item)
        await transfer_input(state, session, target_path, stored)
    result = await session.run(body.code, cancel=cancel, tenant=caller.owner)
    if result.outcome != "busy":
        for output in body.outputFiles or ():
            source_path, target = check_output(caller, output)
            await write_output(state, session, source_path, target)
    return _answer(state, result)


def _answered(response: Response | Hungup) -> Response:
    return Response() if isinstance(response, Hungup) else response


def _answer(state: State, result: ExecutionResult) -> Response:
    state.metrics.observe("execute_code", result.outcome, result.elapsed_ms)
    if result.outcome == "busy":
        fail(503, BUSY_TEXT, retry=True)
    return json_response(result.as_dial())
