"""envd's ``filesystem.Filesystem`` service: Stat, ListDir, MakeDir, Move, Remove.

Everything goes through the session file API, so its guarantees hold: confined beneath the
session's folder, done as the sandbox's user, no link followed (a link is reported as a link,
never entered), the disk quota kept. Watchers run inside the sandbox (``_watch``).
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.e2b import _watch
from corral.e2b._connect import ConnectError, read_message, unary
from corral.e2b._paths import OutsideHome, e2b_path, session_path
from corral.e2b._sandboxes import Sandbox
from corral.e2b._service import service_of
from corral.errors import AccessDenied, InvalidPath, SessionClosed, SessionDiskFull

__all__ = ["routes"]

_MAX_ENTRIES = 10_000  # entries one ListDir answers
_MAX_DEPTH = 32


def _type(info: os.stat_result) -> str:
    if stat.S_ISDIR(info.st_mode):
        return "FILE_TYPE_DIRECTORY"
    if stat.S_ISLNK(info.st_mode):
        return "FILE_TYPE_SYMLINK"
    return "FILE_TYPE_FILE"


def entry_info(rel: str, info: os.stat_result) -> dict[str, Any]:
    path = e2b_path(rel)
    modified = datetime.fromtimestamp(info.st_mtime, UTC).isoformat().replace("+00:00", "Z")
    entry: dict[str, Any] = {
        "name": path.rpartition("/")[2],
        "type": _type(info),
        "path": path,
        "size": str(info.st_size),
        "mode": stat.S_IMODE(info.st_mode),
        "permissions": stat.filemode(info.st_mode),
        "owner": "user",
        "group": "user",
        "modifiedTime": modified,
    }
    if stat.S_ISLNK(info.st_mode):
        entry["isSymlink"] = True
    return entry


def _rel(message: dict[str, Any], field: str = "path") -> str:
    value = message.get(field)
    if not isinstance(value, str):
        raise ConnectError("invalid_argument", f"{field} is required")
    try:
        return session_path(value)
    except OutsideHome as exc:
        raise ConnectError("permission_denied", str(exc)) from None


async def _sandbox(request: Request) -> Sandbox:
    sandbox_id = request.scope["corral.e2b.sandbox"]
    return service_of(request).sandbox_for_envd(request, sandbox_id)


async def _call(request: Request, method: str) -> Response:
    sandbox = await _sandbox(request)
    try:
        message = await read_message(request)
        return unary(await _METHODS[method](sandbox, message))
    except ConnectError as exc:
        return exc.response()
    except FileNotFoundError:
        return ConnectError("not_found", "no such file or directory").response()
    except NotADirectoryError:
        return ConnectError("invalid_argument", "not a directory").response()
    except InvalidPath as exc:
        return ConnectError("invalid_argument", str(exc)).response()
    except AccessDenied as exc:  # the code took the permission away (chmod 0)
        return ConnectError("permission_denied", str(exc)).response()
    except SessionDiskFull as exc:
        return ConnectError("resource_exhausted", str(exc)).response()
    except SessionClosed:
        return ConnectError("unavailable", f"The sandbox {sandbox.id} was not found").response()


async def _stat(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    rel = _rel(message)
    return {"entry": entry_info(rel, await sandbox.session.files.lstat(rel))}


async def _list_dir(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    rel = _rel(message)
    depth = message.get("depth", 1)
    if not isinstance(depth, int) or depth < 0:
        raise ConnectError("invalid_argument", "depth must be a non-negative integer")
    found = await sandbox.session.files.list_dir(
        rel, depth=min(max(depth, 1), _MAX_DEPTH), max_entries=_MAX_ENTRIES
    )
    return {"entries": [entry_info(path, info) for path, info in found]}


async def _make_dir(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    rel = _rel(message)
    if rel == "." or not await sandbox.session.files.make_dir(rel):
        raise ConnectError("already_exists", f"{e2b_path(rel)} already exists")
    return {"entry": entry_info(rel, await sandbox.session.files.lstat(rel))}


async def _move(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    source, destination = _rel(message, "source"), _rel(message, "destination")
    if "." in (source, destination):
        raise ConnectError("invalid_argument", "the home folder itself cannot be moved")
    await sandbox.session.files.move(source, destination)
    return {"entry": entry_info(destination, await sandbox.session.files.lstat(destination))}


async def _remove(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    rel = _rel(message)
    if rel == ".":
        raise ConnectError("invalid_argument", "the home folder itself cannot be removed")
    await sandbox.session.files.remove(rel)
    return {}


_METHODS = {
    "Stat": _stat,
    "ListDir": _list_dir,
    "MakeDir": _make_dir,
    "Move": _move,
    "Remove": _remove,
    **_watch.METHODS,
}


async def dispatch(request: Request) -> Response:
    method = request.path_params["method"]
    if method == "WatchDir":
        return await _watch.watch_dir(request, await _sandbox(request))
    if method not in _METHODS:
        await _sandbox(request)
        return ConnectError(
            "unimplemented", f"filesystem.Filesystem/{method} is not served"
        ).response()
    return await _call(request, method)


routes = [Route("/filesystem.Filesystem/{method}", dispatch, methods=["POST"])]
