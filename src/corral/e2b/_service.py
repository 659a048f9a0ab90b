"""What every E2B route shares: the sandboxes, the keys, E2B's error shape and auth checks."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from corral._config import Config
from corral.e2b._contexts import SANDBOX_USER
from corral.e2b._keys import E2BKeys, same_secret
from corral.e2b._ports import Ports
from corral.e2b._sandboxes import Sandbox, Sandboxes, SessionOpener
from corral.network import NetworkCeiling

__all__ = [
    "ENVD_VERSION",
    "E2BError",
    "E2BService",
    "error_response",
    "read_body",
    "service_of",
]

ENVD_VERSION = "0.5.7"
"""The envd version corral answers: it serves what the SDK gates on up to here (stdin and
closing it, the default user, octet-stream uploads) and nothing newer (file metadata, 0.6.2)."""
SCOPE_KEY = "corral.e2b"


class E2BError(Exception):
    """An answer in E2B's error shape, ``{code, message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def fail(status: int, message: str) -> NoReturn:
    raise E2BError(status, message)


def error_response(status: int, message: str) -> Response:
    return json_response({"code": status, "message": message}, status)


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")


@dataclass(slots=True)
class E2BService:
    """One per app: the E2B view of the engine."""

    sandboxes: Sandboxes
    keys: E2BKeys
    network: NetworkCeiling
    """The server's ``[network]``: all of it is an E2B sandbox's default."""
    max_run_seconds: float
    """``[e2b] max_run_seconds``: the most one ``run_code`` may take."""
    ports: Ports
    """Every sandbox's way into its ports (``_ports``)."""
    domain: str = ""
    """``[e2b] domain``: the domain ``get_host`` names ("": the host a request came to)."""
    templates: object = None
    """The template builds (``_templates.TemplateBuilds``), made at first use."""

    @classmethod
    def build(cls, engine: SessionOpener, config: Config) -> E2BService:
        return cls(
            sandboxes=Sandboxes(engine, config.max_sessions_per_key),
            keys=E2BKeys(config.api_keys),
            network=config.network_ceiling(),
            max_run_seconds=config.max_run_seconds,
            ports=Ports(config.port_max_connections, config.port_max_bytes),
            domain=config.e2b_domain,
        )

    def owner(self, request: Request) -> str:
        """The key's owner id, or E2B's 401."""
        owner = self.keys.owner(request.headers.get("x-api-key"))
        if owner is None:
            fail(401, "Invalid API key, please visit your corral server's configuration")
        return owner

    def sandbox_for_envd(self, request: Request, sandbox_id: str) -> Sandbox:
        """The running sandbox, if the request carries its access token.

        A missing sandbox answers as E2B's proxy does (502, "... was not found"), which the
        SDK reads as a sandbox that is no longer running.
        """
        sandbox = self.sandboxes.find(sandbox_id)
        if sandbox is None:
            fail(502, f"The sandbox {sandbox_id} was not found")
        if not same_secret(request.headers.get("x-access-token"), sandbox.access_token):
            fail(401, "Invalid or missing access token for this sandbox")
        user = _envd_user(request)
        if user not in (None, SANDBOX_USER):
            fail(403, f"user {user!r} is not available: a corral sandbox has one user, "
                      f"{SANDBOX_USER!r}, and no root (run without user=)")  # fmt: skip
        return sandbox

    def sandbox_by_id(self, sandbox_id: str) -> Sandbox:
        """The running sandbox, by its unguessable id alone (the SDK sends no token here)."""
        sandbox = self.sandboxes.find(sandbox_id)
        if sandbox is None:
            fail(502, f"The sandbox {sandbox_id} was not found")
        return sandbox


def _envd_user(request: Request) -> str | None:
    """The user envd's Basic authorization names (the SDK's ``user=``), if any."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        fail(400, "the Authorization header names no user")
    return decoded.partition(":")[0] or None


def service_of(request: Request) -> E2BService:
    service = request.scope[SCOPE_KEY]
    assert isinstance(service, E2BService)
    return service


Body = TypeVar("Body", bound=BaseModel)


async def read_body(request: Request, model: type[Body], *, max_bytes: int) -> Body:
    """The JSON body as ``model`` (an empty body is ``{}``); 413 past ``max_bytes``, 400 naming
    the first problem otherwise."""
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > max_bytes:
            fail(413, "the request body is too large")
    try:
        return model.model_validate(json.loads(raw or b"{}"))
    except (ValueError, ValidationError) as exc:
        fail(400, f"invalid request body: {_first_problem(exc)}")


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}"
    return "not JSON"
