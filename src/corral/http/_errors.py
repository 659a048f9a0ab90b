"""corral errors to HTTP answers: one table looked up by MRO, one renderer per mode.

Handlers raise :class:`fastapi.HTTPException` for request problems they recognise; anything
else that escapes a handler passes through :class:`MappedRoute`, which turns a ``CorralError``
into its status from :data:`STATUS_BY_ERROR` and any other exception into 500 ``Internal
error`` (logged, never echoed). The gateway speaks DIAL Core's plain-text bodies, byte for byte
(a client may compare them), except for errors DIAL relays from its interpreter container,
which are JSON (``detail`` given as a dict); container mode always answers ``{"detail": ...}``.
What corral can say beyond DIAL's text (which field was wrong) goes in the
``Corral-Error-Detail`` header and the log. corral's own routes (:class:`OwnRoute`) answer
``{"error": {"type", "message", "field"?}}`` whatever the mode.
"""

from __future__ import annotations

import errno
import json
import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from corral.errors import (
    AccessDenied,
    BucketFull,
    Busy,
    CorralError,
    EngineClosed,
    FileTooLarge,
    InvalidPath,
    NetworkPolicyError,
    NetworkUnavailable,
    SessionClosed,
    SessionDiskFull,
    SessionNotFound,
    SnapshotError,
    SnapshotNotFound,
    TemplateError,
    TemplateNotFound,
    ZygoteUnavailable,
)
from corral.http._responses import json_response

__all__ = [
    "BUSY_TEXT",
    "DETAIL_HEADER",
    "RETRY_AFTER",
    "STATUS_BY_ERROR",
    "UNAVAILABLE_TEXT",
    "ApiError",
    "MappedRoute",
    "OwnRoute",
    "describe_invalid",
    "error_body",
    "fail",
    "header_text",
    "install_error_handlers",
    "status_for",
]

logger = logging.getLogger("corral.http")

RETRY_AFTER = "1"  # seconds; a busy engine frees a worker within one typical run
BUSY_TEXT = "Code interpreter is busy, retry later"
UNAVAILABLE_TEXT = "Code interpreter is not available"
PLAIN = "text/plain; charset=utf-8"
DETAIL_HEADER = "Corral-Error-Detail"
"""Says what DIAL's fixed text cannot (``unknown field 'timeout'``); DIAL's clients ignore it."""
_DETAIL_CHARS = 512  # a header, not a report: the log keeps the same words
_SHORT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})

STATUS_BY_ERROR: dict[type[BaseException], int] = {
    SessionNotFound: 404,
    SessionClosed: 404,
    InvalidPath: 400,
    AccessDenied: 403,  # the sandboxed code took the permission away: the request cannot be done
    FileTooLarge: 413,
    SessionDiskFull: 413,
    BucketFull: 413,
    Busy: 503,
    EngineClosed: 503,
    ZygoteUnavailable: 503,  # no zygote to open a session from: the service, not the request
    NetworkUnavailable: 503,  # no nftables, say: the service, not the request
    NetworkPolicyError: 422,
    TemplateNotFound: 404,
    TemplateError: 422,
    SnapshotNotFound: 404,
    SnapshotError: 409,  # its paused state is corrupt or could not be kept: that session's
    CorralError: 500,
}
"""Status of every corral error reaching a front end; the most specific class wins."""

_TEXT_BY_ERROR: dict[type[BaseException], str] = {
    SessionNotFound: "Session is not found",
    SessionClosed: "Session is not found",
    SnapshotNotFound: "Session is not found",
    SnapshotError: "Session cannot be resumed",
    InvalidPath: "Bad path",
    AccessDenied: "Permission denied",
    FileTooLarge: "File too large",
    SessionDiskFull: "Session disk quota exceeded",
    BucketFull: "Bucket quota exceeded",
    Busy: BUSY_TEXT,
    EngineClosed: UNAVAILABLE_TEXT,
    ZygoteUnavailable: UNAVAILABLE_TEXT,
    NetworkUnavailable: "Network is not available",
    NetworkPolicyError: "Network policy is not allowed",
    TemplateNotFound: "Template is not found",
    TemplateError: "Template is not usable",
    CorralError: "Internal error",
}


def _lookup(table: dict[type[BaseException], Any], exc: BaseException) -> Any:
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return None


def status_for(exc: BaseException) -> int:
    """The HTTP status of a corral error (500 for anything unmapped)."""
    return _lookup(STATUS_BY_ERROR, exc) or 500


def fail(
    status: int, detail: str | dict[str, Any], *, retry: bool = False, explain: str | None = None
) -> NoReturn:
    """Answer now: a string is the gateway's plain text, a dict a relayed JSON body.

    ``explain`` is what went wrong in corral's words, for the ``Corral-Error-Detail`` header
    and the log, when the body must stay DIAL's exact text.
    """
    headers = {"Retry-After": RETRY_AFTER} if retry else {}
    if explain is not None:
        logger.info("answered %d %s: %s", status, detail, explain)
        headers[DETAIL_HEADER] = header_text(explain)
    raise HTTPException(status, detail, headers=headers or None)


def header_text(text: str) -> str:
    """``text`` as a header value: printable ASCII (anything else escaped, as a field name a
    client chose may hold a newline or a lone surrogate) and at most ``_DETAIL_CHARS``."""
    escaped = "".join(
        c if " " <= c <= "~" else c.encode("unicode_escape", "backslashreplace").decode("ascii")
        for c in text
    )
    return escaped if len(escaped) <= _DETAIL_CHARS else escaped[: _DETAIL_CHARS - 3] + "..."


def _as_http(exc: Exception) -> HTTPException:
    if isinstance(exc, CorralError):
        status = status_for(exc)
        if status >= 500 and not isinstance(exc, Busy | EngineClosed):
            logger.error("request failed: %r", exc, exc_info=exc)
        retry = {"Retry-After": RETRY_AFTER} if isinstance(exc, Busy | ZygoteUnavailable) else None
        return HTTPException(status, _lookup(_TEXT_BY_ERROR, exc), headers=retry)
    if isinstance(exc, UnicodeError):
        # A lone surrogate from a client's JSON ("\\ud800") that reached an encoder.
        return HTTPException(400, "Invalid Unicode in the request (a lone surrogate)")
    if isinstance(exc, OSError) and exc.errno in _SHORT_OF_RESOURCES:
        logger.warning("a request failed for lack of resources: %s", exc)
        return HTTPException(503, UNAVAILABLE_TEXT, headers={"Retry-After": RETRY_AFTER})
    if isinstance(exc, ClientDisconnect):
        # The client is gone (or the body limit cut it off); nobody reads this answer.
        return HTTPException(400, "Client disconnected")
    logger.exception("unexpected failure", exc_info=exc)
    return HTTPException(500, "Internal error")


class MappedRoute(APIRoute):
    """An APIRoute whose handler failures become HTTPExceptions (never a bare 500)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def mapped(request: Request) -> Response:
            try:
                return await handler(request)
            except (StarletteHTTPException, RequestValidationError):
                raise
            except Exception as exc:
                raise _as_http(exc) from exc

        return mapped


def install_error_handlers(app: FastAPI, *, plain_text: bool) -> None:
    """Render HTTPExceptions as DIAL Core does (``plain_text``) or as its container does."""

    async def render(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        detail: Any = _encodable(exc.detail)
        if isinstance(detail, dict):
            return JSONResponse(detail, exc.status_code, headers=headers)
        if plain_text:
            return PlainTextResponse(detail, exc.status_code, headers, media_type=PLAIN)
        return JSONResponse({"detail": detail}, exc.status_code, headers=headers)

    app.add_exception_handler(StarletteHTTPException, render)
    app.add_exception_handler(RequestValidationError, _invalid_request)


JSON_SAFE: dict[Any, Callable[[Any], Any]] = {
    bytes: lambda raw: raw.decode("utf-8", "replace"),
    # JSON has no NaN or Infinity, which Python's reader accepts and a 422 echoes.
    float: lambda value: value if math.isfinite(value) else repr(value),
}
"""``jsonable_encoder``'s ``custom_encoder`` for a body's echoed input: any of it encodes."""


async def _invalid_request(request: Request, exc: Exception) -> Response:
    """FastAPI's 422, safe for any body: its own handler fails (500) when the echoed input
    holds bytes that are not UTF-8 or a lone surrogate."""
    assert isinstance(exc, RequestValidationError)
    errors = jsonable_encoder(exc.errors(), custom_encoder=JSON_SAFE)
    try:
        return JSONResponse({"detail": errors}, 422)
    except UnicodeEncodeError:
        body = json.dumps({"detail": errors}, ensure_ascii=True, separators=(",", ":"))
        return Response(body, 422, media_type="application/json")


def _encodable(detail: Any) -> Any:
    """``detail`` with lone surrogates escaped: a message may echo a client's text (an unknown
    session id) that JSON decoding let through but UTF-8 cannot encode."""
    if isinstance(detail, str):
        return detail.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(detail, dict):
        return {_encodable(key): _encodable(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_encodable(item) for item in detail]
    return detail


_TYPE_BY_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    422: "invalid_request",
    429: "too_many_sessions",
    500: "internal",
    503: "busy",
}


class ApiError(HTTPException):
    """A request problem on corral's own routes, naming the offending field when there is one."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, headers=headers)
        self.field = field
        self.kind = kind or _TYPE_BY_STATUS.get(status, "error")


def error_body(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    """corral's one JSON error shape."""
    error: dict[str, Any] = {"type": kind, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}


def describe_invalid(exc: ValidationError) -> tuple[str, str | None]:
    """A validation failure as one sentence naming its field, and that field (dotted path)."""
    first = exc.errors(include_url=False)[0]
    loc = [str(part) for part in first.get("loc", ())]
    field = ".".join(loc) or None
    kind = first.get("type", "")
    if kind == "json_invalid":
        return f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'syntax')})", None
    if field is None:
        return "the body must be a JSON object", None
    if kind == "extra_forbidden":
        return f"unknown field {field!r}", field
    if kind == "missing":
        return f"missing field {field!r}", field
    return f"field {field!r}: {first.get('msg', 'invalid value')}", field


def _own_answer(exc: Exception) -> Response:
    if isinstance(exc, RequestValidationError):
        errors = exc.errors()
        loc = [str(p) for p in (errors[0].get("loc", ()) if errors else ()) if p != "body"]
        field = ".".join(loc) or None
        message = f"field {field!r}: {errors[0].get('msg')}" if field and errors else "invalid"
        return json_response(error_body("invalid_request", message, field), 422)
    if not isinstance(exc, StarletteHTTPException):
        exc = _as_http(exc)
    assert isinstance(exc, StarletteHTTPException)
    detail: Any = exc.detail
    if isinstance(detail, dict):  # a relayed interpreter body: {"detail": "..."}
        detail = str(detail.get("detail", detail))
    field = getattr(exc, "field", None)
    kind = getattr(exc, "kind", None) or _TYPE_BY_STATUS.get(exc.status_code, "error")
    if exc.status_code == 503 and detail == UNAVAILABLE_TEXT:
        kind = "unavailable"
    body = _encodable(error_body(kind, str(detail), field))
    return json_response(body, exc.status_code, headers=dict(exc.headers or {}))


class OwnRoute(APIRoute):
    """corral's own routes: every failure, authentication included, in the JSON error shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answered(request: Request) -> Response:
            try:
                return await handler(request)
            except (StarletteHTTPException, RequestValidationError) as exc:
                return _own_answer(exc)
            except Exception as exc:  # noqa: BLE001 - _as_http logs what it does not know
                return _own_answer(_as_http(exc))

        return answered
