"""The DIAL-style files API the gateway's transfers use (docs/dial.md §6).

``GET /v1/bucket`` names the caller's bucket; ``PUT``/``GET``/``DELETE /v1/files/<bucket>/
<path>`` store, read and remove files in it. Each key owns exactly one bucket and can reach no
other (403). Storage URLs (``files/<bucket>/<path>``, percent-encoded segments) are parsed
here for the transfer operations too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Request, Response

from corral import _fs
from corral._mime import guess_media_type
from corral.errors import FileTooLarge
from corral.http._auth import Caller
from corral.http._docs import BucketResponse, FileMetadata, json_model, multipart_body, plain_errors
from corral.http._errors import MappedRoute, fail
from corral.http._multipart import MultipartReader
from corral.http._responses import file_response, json_response
from corral.http._state import State, caller_of, state_of
from corral.http._store import StoredFile

__all__ = ["FileUrl", "file_metadata", "guess_type", "parse_file_url", "router"]

DOT_ENDING = "Resource name and/or parent folders must not end with .(dot)"


@dataclass(frozen=True, slots=True)
class FileUrl:
    """A parsed ``files/<bucket>/<path>``; ``path`` is decoded, ``url`` as the caller wrote it."""

    url: str
    bucket: str
    path: str
    is_folder: bool


def _decode(segments: list[str]) -> list[str] | None:
    decoded = [unquote(s, errors="strict") for s in segments]
    bad = any(not s or "/" in s or any(ord(c) < 0x20 for c in s) for s in decoded)
    return None if bad else decoded


def parse_file_url(url: str) -> FileUrl | None:
    """Parse a storage URL; None when it is not ``files/<bucket>/<path>``."""
    scheme, _, rest = url.partition("/")
    if scheme != "files":
        return None
    bucket, _, path = rest.partition("/")
    is_folder = path.endswith("/")
    try:
        segments = _decode(path.removesuffix("/").split("/")) if path.removesuffix("/") else []
        buckets = _decode([bucket])
    except UnicodeDecodeError:
        return None
    if segments is None or not buckets:
        return None
    return FileUrl(url, buckets[0], "/".join(segments), is_folder)


def guess_type(name: str) -> str:
    """A content type from a file name's extension."""
    return guess_media_type(name)


def file_metadata(file: StoredFile) -> dict[str, Any]:
    """DIAL's ``FileMetadata`` (null fields omitted except ``parentPath``)."""
    parent, _, name = file.path.rpartition("/")
    encoded = "/".join(quote(s, safe="") for s in file.path.split("/"))
    return {
        "name": name,
        "parentPath": parent or None,
        "bucket": file.bucket,
        "url": f"files/{quote(file.bucket, safe='')}/{encoded}",
        "nodeType": "ITEM",
        "resourceType": "FILE",
        "createdAt": file.created_at,
        "updatedAt": file.updated_at,
        "etag": file.etag,
        "contentLength": file.size,
        "contentType": file.content_type,
    }


router = APIRouter(route_class=MappedRoute)


_BINARY = {"type": "string", "format": "binary"}
_BYTES: dict[str, Any] = {"content": {"application/octet-stream": {"schema": _BINARY}}}
_METADATA: dict[str, Any] = {
    "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{FileMetadata.__name__}"}}
    }
}
json_model(FileMetadata)


@router.get("/v1/bucket", response_model=BucketResponse, responses=plain_errors(401))
async def get_bucket(request: Request) -> Response:
    caller = caller_of(request)
    return json_response({"bucket": caller.bucket})


def _target(request: Request) -> tuple[State, Caller, FileUrl]:
    """The caller's file named by the request path; one bucket per key, so READ and WRITE
    access coincide: 403 for every other bucket."""
    state, caller = state_of(request), caller_of(request)
    raw = request.scope.get("raw_path") or request.url.path.encode()
    url = raw.decode("latin-1").removeprefix("/v1/")
    target = parse_file_url(url)
    if target is None or (not target.path and not target.is_folder):
        fail(400, f"Bad file url:{url}")
    if target.bucket != caller.bucket:
        fail(403, f"You don't have an access to: {url}")
    return state, caller, target


@router.put(
    "/v1/files/{bucket}/{path:path}",
    response_class=Response,
    openapi_extra=multipart_body("the file to store; its part's content type is kept"),
    responses={200: {"description": "DIAL's FileMetadata", **_METADATA}, **plain_errors(400, 403)},
)
async def put_file(request: Request) -> Response:
    state, caller, target = _target(request)
    if target.is_folder or not target.path:
        fail(400, "File name is missing")
    if any(s.endswith(".") for s in target.path.split("/")):
        fail(400, DOT_ENDING)
    if "content-type" not in request.headers:
        fail(400, "Request must have a content-type header to decode a multipart request")
    reader = MultipartReader.of(request)
    if reader is None:
        fail(400, "Request must have a valid content-type header to decode a multipart request")
    part = await reader.next_part()
    while part is not None and part.filename is None:
        part = await reader.next_part()
    if part is None:
        fail(400, "Missing file in multipart upload")
    content_type = part.content_type or guess_type(target.path)
    try:
        stored = await state.store.put(
            caller.bucket,
            target.path,
            _complete(reader),
            content_type,
            max_bytes=state.config.upload_max_size,
        )
    except FileTooLarge:
        fail(413, {"detail": "File too large"})
    return json_response(file_metadata(stored), headers={"ETag": stored.etag})


async def _complete(reader: MultipartReader) -> AsyncIterator[bytes]:
    async for chunk in reader.chunks():
        yield chunk
    if reader.malformed:
        fail(400, "Malformed multipart body")


@router.get(
    "/v1/files/{bucket}/{path:path}",
    response_class=Response,
    responses={200: {"description": "The stored bytes", **_BYTES}, **plain_errors(400, 403, 404)},
)
async def get_file(request: Request) -> Response:
    state, caller, target = _target(request)
    if target.is_folder:
        fail(400, "Can't download a folder")
    stored = await state.store.get(caller.bucket, target.path)
    if stored is None:
        fail(404, "")
    try:
        fd, size = _fs.open_file(*state.store.blob_location(stored))
    except FileNotFoundError:
        fail(404, "")  # replaced or deleted since the lookup
    return file_response(fd, size, media_type=stored.content_type, headers={"ETag": stored.etag})


@router.delete(
    "/v1/files/{bucket}/{path:path}",
    response_class=Response,
    responses={200: {"description": "Deleted (empty body)"}, **plain_errors(400, 403, 404)},
)
async def delete_file(request: Request) -> Response:
    state, caller, target = _target(request)
    if target.is_folder:
        fail(400, "Can't delete a folder")
    if not await state.store.delete(caller.bucket, target.path):
        fail(404, "")
    return Response(status_code=200)
