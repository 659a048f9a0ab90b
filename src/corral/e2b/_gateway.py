"""One port for E2B and corral: route E2B's requests to ``corral.e2b``, all others unchanged.

Data-plane requests name their sandbox and port by the ``E2b-Sandbox-Id`` and
``E2b-Sandbox-Port`` headers, or by a ``<port>-<id>.<domain>`` host name (``E2B_DOMAIN``
deployments). The control plane's paths (``/sandboxes``, ``/v2/sandboxes``) are E2B's alone.
Anything else goes to the wrapped app as it came.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.requests import Request
from starlette.routing import BaseRoute, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from corral._digits import ascii_int
from corral.e2b import _control, _files, _filesystem, _interpreter, _process, _templates
from corral.e2b._pausing import EXTRA_PATHS
from corral.e2b._ports import refuse
from corral.e2b._service import SCOPE_KEY, E2BError, E2BService, error_response
from corral.errors import CorralError

__all__ = ["E2BGateway"]

ENVD_PORT = 49983
INTERPRETER_PORT = 49999
_PORT_DIGITS = 5
_MAX_PORT = 65535
_HOST = re.compile(r"([0-9]{1,5})-([0-9a-z]{1,64})\.")
_CONTROL = re.compile(r"/(v2/)?sandboxes(/|$)|/(v2/|v3/)?templates(/|$)")
_FILES = "/files"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _target(scope: Scope) -> tuple[str, int | None] | None:
    """(sandbox id, port) of a data-plane request, or None; the port is None when the header
    does not name one (not 1 to 65535 in ASCII digits)."""
    sandbox_id = _header(scope, b"e2b-sandbox-id")
    if sandbox_id is not None:
        port = _header(scope, b"e2b-sandbox-port")
        number = ENVD_PORT if port is None else ascii_int(port, max_digits=_PORT_DIGITS)
        return sandbox_id, number if number is not None and 0 < number <= _MAX_PORT else None
    match = _HOST.match(_header(scope, b"host") or "")
    if match is not None:
        return match.group(2), int(match.group(1))
    return None


def _guarded(router: Router) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await router(scope, receive, send)
        except E2BError as exc:
            await error_response(exc.status, exc.message)(scope, receive, send)
        except CorralError as exc:
            # The engine could not serve it (closed, sandbox failed to start): not the client's
            # fault, and not shaped like the code was wrong.
            await error_response(503, f"{type(exc).__name__}: {exc}")(scope, receive, send)

    return app


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(404, f"{Request(scope).url.path}: no such route")(scope, receive, send)


def _router(routes: Sequence[BaseRoute]) -> Router:
    return Router(routes=list(routes), default=_not_found)


class E2BGateway:
    """ASGI middleware in front of corral's app, serving E2B's API on the same port."""

    def __init__(self, app: ASGIApp, *, service: E2BService) -> None:
        self._app = app
        self._service = service
        self._control = _guarded(_router([*_control.routes, *_templates.routes]))
        self._envd = _guarded(_router([*_files.routes, *_filesystem.routes, *_process.routes]))
        self._interpreter = _guarded(_router(_interpreter.routes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        target = _target(scope)
        if scope["type"] == "websocket":
            if target is None or target[1] in (None, ENVD_PORT, INTERPRETER_PORT):
                await self._app(scope, receive, send)
            else:
                await self._port(target[0], target[1], scope, receive, send)
            return
        if target is not None:
            sandbox_id, port = target
            await self._service.sandboxes.wake(sandbox_id)  # auto_resume: traffic wakes it
            scope = {**scope, SCOPE_KEY: self._service, "corral.e2b.sandbox": sandbox_id}
            if port is None:
                malformed = error_response(400, "E2b-Sandbox-Port must be a port number")
                await malformed(scope, receive, send)
            elif port == ENVD_PORT:
                await self._envd(scope, receive, send)
            elif port == INTERPRETER_PORT:
                await self._interpreter(scope, receive, send)
            else:
                await self._port(sandbox_id, port, scope, receive, send)
            return
        if scope["path"] == _FILES and b"signature=" in scope.get("query_string", b""):
            # A signed files URL (download_url, upload_url) names no sandbox: its signature does.
            await self._envd({**scope, SCOPE_KEY: self._service}, receive, send)
            return
        if _CONTROL.match(scope["path"]) or EXTRA_PATHS.match(scope["path"]):
            await self._control({**scope, SCOPE_KEY: self._service}, receive, send)
            return
        await self._app(scope, receive, send)

    async def _port(
        self, sandbox_id: str, port: int, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request into a port of the sandbox (``_ports``)."""
        sandbox = self._service.sandboxes.find(sandbox_id)
        if sandbox is None:
            await refuse(scope, receive, send, 502, f"The sandbox {sandbox_id} was not found")
            return
        await self._service.ports.serve(sandbox, port, scope, receive, send)
