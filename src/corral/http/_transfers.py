"""Moving files between a session and the files store, and uploads into a session.

Shared by the ``upload_file`` and ``transfer_*`` operations and by ``execute_code``'s
``inputFiles``/``outputFiles``, with DIAL Core's checks in DIAL Core's order (docs/dial.md §5.6).
Errors DIAL relays from its interpreter container (``Bad path``, ``File not found``, ``File too
large``) keep the container's JSON body; the gateway's own are plain text.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import NoReturn

from corral.errors import AccessDenied, FileTooLarge, InvalidPath, SessionDiskFull
from corral.http._auth import Caller
from corral.http._engine_api import SessionAPI
from corral.http._errors import fail
from corral.http._files_api import FileUrl, guess_type, parse_file_url
from corral.http._models import InputFile, OutputFile, file_path_ok
from corral.http._paths import Resolved, bad_path, resolve
from corral.http._state import State
from corral.http._store import StoredFile

__all__ = [
    "access_denied",
    "check_file_path",
    "check_file_url",
    "check_output",
    "download_from_session",
    "file_not_found",
    "open_in_session",
    "prepare_input",
    "resolve_upload_target",
    "stream_upload",
    "too_large",
    "transfer_input",
    "upload_into_session",
    "write_output",
]


def file_not_found(relative: str) -> NoReturn:
    fail(404, {"detail": f"File not found: {relative}"})


def too_large() -> NoReturn:
    fail(413, {"detail": "File too large"})


def access_denied(relative: str) -> NoReturn:
    """403 for a folder the sandboxed code made unwritable or unreadable (``chmod 0``); DIAL's
    container has no answer of its own for it (a 500), so the body is in its JSON shape."""
    fail(403, {"detail": f"Permission denied: {relative}"})


def check_file_path(path: str | None) -> str:
    """400 ``Bad file path:<path>`` for a missing path or a NUL byte."""
    if not file_path_ok(path):
        fail(400, f"Bad file path:{'null' if path is None else path}")
    assert path is not None
    return path


def check_file_url(caller: Caller, url: str | None) -> FileUrl:
    """400 ``Bad file url:``, 403 ``File is not accessible:`` (one bucket per key)."""
    target = None if url is None else parse_file_url(url)
    if target is None or target.is_folder or not target.path:
        fail(400, f"Bad file url:{'null' if url is None else url}")
    if target.bucket != caller.bucket:
        fail(403, f"File is not accessible: {url}")
    return target


async def prepare_input(state: State, caller: Caller, item: InputFile) -> tuple[str, StoredFile]:
    """The checks of ``transfer_input_file`` that precede the session lookup."""
    target_path = check_file_path(item.targetPath)
    source = check_file_url(caller, item.sourceUrl)
    stored = await state.store.get(source.bucket, source.path)
    if stored is None:
        fail(404, f"File is not found: {source.url}")
    return target_path, stored


def resolve_upload_target(path: str) -> Resolved:
    """Where an upload goes; ``Missing path`` / ``Bad path`` as the container answers."""
    if not path:
        fail(400, {"detail": "Missing path"})
    target = resolve(path)
    if target.is_root:
        bad_path(target.absolute)
    return target


async def upload_into_session(
    session: SessionAPI, target: Resolved, data: bytes | AsyncIterable[bytes]
) -> int:
    """Write ``data`` (bytes or streamed chunks) into the session; the size written."""
    try:
        info = await session.put_file(target.relative, data)
    except InvalidPath:
        bad_path(target.absolute)
    except AccessDenied:
        access_denied(target.relative)
    except (FileTooLarge, SessionDiskFull):
        too_large()
    return info.size


async def stream_upload(
    chunks: AsyncIterator[bytes], limit: int, malformed: Callable[[], bool], message: str
) -> AsyncIterator[bytes]:
    """The uploaded file's chunks as they arrive: 413 ``File too large`` past ``limit`` bytes,
    400 ``message`` if the body turns out malformed. Either ends the upload with nothing
    written, because the session writes atomically."""
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            too_large()
        yield chunk
    if malformed():
        fail(400, message)


async def transfer_input(state: State, session: SessionAPI, path: str, stored: StoredFile) -> int:
    """Copy a stored file into the session (the tail of ``transfer_input_file``)."""
    target = resolve_upload_target(path)
    if stored.size > state.config.upload_max_size:
        too_large()
    try:
        data = await state.store.read(stored)
    except FileNotFoundError:
        fail(404, f"File is not found: files/{stored.bucket}/{stored.path}")
    return await upload_into_session(session, target, data)


async def download_from_session(session: SessionAPI, path: str) -> tuple[Resolved, bytes]:
    """A session file's bytes; 400 ``Bad path`` or 404 ``File not found`` otherwise."""
    source = resolve(path)
    if source.is_root:
        file_not_found(source.relative)
    try:
        return source, await session.get_file(source.relative)
    except (InvalidPath, AccessDenied, FileNotFoundError, IsADirectoryError, NotADirectoryError):
        # A link (inside or out), a folder or nothing: DIAL serves regular files only.
        file_not_found(source.relative)


async def open_in_session(session: SessionAPI, path: str) -> tuple[int, int]:
    """``(fd, size)`` of a session file, to stream: a download never holds the file in memory
    (a session may hold many sparse 64 MiB files, and clients may ask for them all at once)."""
    source = resolve(path)
    if source.is_root:
        file_not_found(source.relative)
    try:
        return await session.open_file(source.relative)
    except (InvalidPath, AccessDenied, FileNotFoundError, IsADirectoryError, NotADirectoryError):
        file_not_found(source.relative)


def check_output(caller: Caller, item: OutputFile) -> tuple[str, FileUrl]:
    """The checks of ``transfer_output_file`` that precede the session lookup."""
    return check_file_path(item.sourcePath), check_file_url(caller, item.targetUrl)


async def write_output(
    state: State, session: SessionAPI, source_path: str, target: FileUrl
) -> StoredFile:
    """Copy a session file into the store (the tail of ``transfer_output_file``)."""
    _, data = await download_from_session(session, source_path)
    name = target.path.rpartition("/")[2]
    return await state.store.put_bytes(target.bucket, target.path, data, guess_type(name))
