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
from starlette.responses import Response
from starlette.routing import BaseRoute, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.e2b import _control, _files, _filesystem, _interpreter, _process
from corral.e2b._service import SCOPE_KEY, E2BError, E2BService, error_response
from corral.errors import CorralError

__all__ = ["E2BGateway"]

ENVD_PORT = 49983
INTERPRETER_PORT = 49999
_HOST = re.compile(r"(\d{1,5})-([0-9a-z]{1,64})\.")
_CONTROL = re.compile(r"/(v2/)?sandboxes(/|$)")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _target(scope: Scope) -> tuple[str, int] | None:
    """(sandbox id, port) of a data-plane request, or None."""
    sandbox_id = _header(scope, b"e2b-sandbox-id")
    if sandbox_id is not None:
        port = _header(scope, b"e2b-sandbox-port") or str(ENVD_PORT)
        return sandbox_id, int(port) if port.isdigit() and len(port) <= 5 else -1
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
        self._control = _guarded(_router(_control.routes))
        self._envd = _guarded(_router([*_files.routes, *_filesystem.routes, *_process.routes]))
        self._interpreter = _guarded(_router(_interpreter.routes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        target = _target(scope)
        if target is not None:
            sandbox_id, port = target
            scope = {**scope, SCOPE_KEY: self._service, "corral.e2b.sandbox": sandbox_id}
            if port == ENVD_PORT:
                await self._envd(scope, receive, send)
            elif port == INTERPRETER_PORT:
                await self._interpreter(scope, receive, send)
            else:
                response: Response = error_response(
                    502, f"The sandbox {sandbox_id} port is not open: {port}"
                )
                await response(scope, receive, send)
            return
        if _CONTROL.match(scope["path"]):
            await self._control({**scope, SCOPE_KEY: self._service}, receive, send)
            return
        await self._app(scope, receive, send)
