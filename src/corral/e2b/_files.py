"""envd's HTTP API (port 49983): ``/health`` and ``/files`` download and upload.

Uploads come as ``multipart/form-data`` (field ``file``; the part's file name is its path
when the query has none) or, from envd 0.5.7 on, as ``application/octet-stream``. Both are
written through the session file API: atomically, confined, and within the disk quota; an
upload over the quota answers 507 and leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message

from corral import _fs
from corral._digits import ascii_int
from corral.e2b._paths import OutsideHome, e2b_path, session_path
from corral.e2b._sandboxes import Sandbox
from corral.e2b._service import fail, json_response, service_of
from corral.e2b._signed import Operation, is_signed, signed_sandbox
from corral.errors import AccessDenied, FileTooLarge, InvalidPath, SessionClosed, SessionDiskFull

__all__ = ["routes"]

_CHUNK_BYTES = 64 * 1024  # bytes of a download read from its file at a time
_OCTETS = "application/octet-stream"
_MAX_PARTS = 64  # files in one multipart upload
_UPLOAD_CHUNK = 1024 * 1024  # bytes read from a spooled multipart file at a time
_FORM_OVERHEAD = 1024 * 1024  # bytes of multipart framing allowed beyond the disk quota
_LENGTH_DIGITS = 20  # a Content-Length longer than this is no size a disk holds


def _sandbox(request: Request, operation: Operation) -> Sandbox:
    """The sandbox a request names and proves with its access token, or the one whose token
    signed its URL (``_signed``)."""
    service = service_of(request)
    named = request.scope.get("corral.e2b.sandbox")
    if is_signed(request):
        if named is None:
            return signed_sandbox(request, operation, service.sandboxes.alive())
        found = service.sandboxes.find(named)
        if found is None:
            fail(502, f"The sandbox {named} was not found")
        return signed_sandbox(request, operation, [found])
    if named is None:
        fail(401, "a files URL needs the sandbox's access token or a signature")
    return service.sandbox_for_envd(request, named)


def _rel(path: str | None) -> str:
    if path is None:
        fail(400, "the path query parameter is required")
    try:
        rel = session_path(path)
    except OutsideHome as exc:
        fail(400, str(exc))
    if rel == ".":
        fail(400, f"{path}: is a directory")
    return rel


async def health(request: Request) -> Response:
    named = request.scope.get("corral.e2b.sandbox")
    if named is None:
        fail(404, "/health: name the sandbox")
    service_of(request).sandbox_for_envd(request, named)
    return Response(status_code=204)


async def download(request: Request) -> Response:
    sandbox = _sandbox(request, "read")
    path = request.query_params.get("path")
    rel = _rel(path)
    try:
        # Streamed from an open descriptor: never the whole file in the server's memory.
        fd, size = await sandbox.session.open_file(rel)
    except (FileNotFoundError, AccessDenied):
        fail(404, f"path '{path}' does not exist or is not a file")
    except InvalidPath as exc:
        fail(400, str(exc))
    except SessionClosed:
        fail(502, f"The sandbox {sandbox.id} was not found")
    name = rel.rpartition("/")[2]
    headers = {
        "content-length": str(size),
        "content-disposition": f"attachment; filename*=UTF-8''{_quote(name)}",
    }
    return StreamingResponse(
        _fs.read_chunks(fd, size, _CHUNK_BYTES), media_type=_OCTETS, headers=headers
    )


def _quote(name: str) -> str:
    return quote(name, safe="")


def _bounded(request: Request, limit: int) -> Request:
    """The same request, whose body stops with 507 past ``limit`` bytes."""
    seen = 0

    async def receive() -> Message:
        nonlocal seen
        message = await request.receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            fail(507, "the upload is larger than the sandbox's disk quota")
        return message

    return Request(request.scope, receive)


async def _spooled(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(_UPLOAD_CHUNK):
        yield chunk


async def upload(request: Request) -> Response:
    sandbox = _sandbox(request, "write")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query_path = request.query_params.get("path")
    written: list[dict[str, str]] = []
    try:
        if media == "application/octet-stream":
            if request.headers.get("content-encoding", "identity") != "identity":
                fail(400, "compressed uploads are not supported")
            rel = _rel(query_path)
            await sandbox.session.put_file(rel, request.stream())
            written.append(_written(rel))
        elif media == "multipart/form-data":
            limit = sandbox.session.files.quota_bytes + _FORM_OVERHEAD
            length = ascii_int(request.headers.get("content-length", ""), max_digits=_LENGTH_DIGITS)
            if length is not None and length > limit:
                fail(507, "the upload is larger than the sandbox's disk quota")
            bounded = _bounded(request, limit)
            form = await bounded.form(max_files=_MAX_PARTS, max_fields=_MAX_PARTS)
            try:
                uploads = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
                if not uploads:
                    fail(400, "the multipart body has no file")
                for item in uploads:
                    rel = _rel(query_path if len(uploads) == 1 and query_path else item.filename)
                    await sandbox.session.put_file(rel, _spooled(item))
                    written.append(_written(rel))
            finally:
                await form.close()
        else:
            fail(400, "upload as multipart/form-data or application/octet-stream")
    except (SessionDiskFull, FileTooLarge) as exc:
        fail(507, str(exc))
    except InvalidPath as exc:
        fail(400, str(exc))
    except AccessDenied as exc:  # the code took the permission away (chmod 0)
        fail(403, str(exc))
    except SessionClosed:
        fail(502, f"The sandbox {sandbox.id} was not found")
    return json_response(written)


def _written(rel: str) -> dict[str, str]:
    return {"name": rel.rpartition("/")[2], "type": "file", "path": e2b_path(rel)}


routes = [
    Route("/health", health, methods=["GET"]),
    Route("/files", download, methods=["GET"]),
    Route("/files", upload, methods=["POST"]),
]
