"""Request body limits, enforced while the body streams in (pure ASGI middleware).

A declared ``Content-Length`` over the limit is refused before a byte is read; a chunked body
is cut off as soon as it passes the limit. Uploads get ``upload_max_size`` plus room for the
multipart framing (the reader stops at the exact file limit itself); everything else gets
``max_request_bytes``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral._digits import ascii_int

__all__ = ["OWN_JSON_PATHS", "UPLOAD_FRAMING", "BodyLimit"]

UPLOAD_FRAMING = 64 * 1024  # bytes of multipart headers and boundaries allowed around a file
_LENGTH_DIGITS = 20  # a Content-Length longer than this is over every limit anyway
OWN_JSON_PATHS = frozenset({"/v1/execute"})
"""corral's own routes, answered in its JSON error shape."""


class BodyLimit:
    """Answer 413 for bodies over the limit of their route, without reading them whole."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_request_bytes: int,
        upload_max_size: int,
        is_upload: Callable[[str, str], bool],
        plain_text: bool,
    ) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.max_upload_bytes = upload_max_size + UPLOAD_FRAMING
        self.is_upload = is_upload
        self.plain_text = plain_text

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = self.is_upload(scope["method"], scope["path"])
        own = scope["path"] in OWN_JSON_PATHS
        limit = self.max_upload_bytes if upload else self.max_request_bytes
        length = dict(scope["headers"]).get(b"content-length", b"")
        declared = ascii_int(length, max_digits=_LENGTH_DIGITS)
        if declared is not None and declared > limit:
            await self._refuse(send, upload, own)
            return
        received = 0
        refused = started = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        await self._refuse(send, upload, own)
                    # The app sees a client that went away and stops reading.
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if not refused:
                started = True
                await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _refuse(self, send: Send, upload: bool, own: bool) -> None:
        if own:  # corral's own routes speak one JSON error shape
            error = {"type": "too_large", "message": "Request body too large"}
            body, media = json.dumps({"error": error}).encode(), b"application/json"
        elif upload:  # the interpreter's own answer, in both modes (docs/dial.md §4.6)
            body, media = json.dumps({"detail": "File too large"}).encode(), b"application/json"
        elif self.plain_text:
            body, media = b"Request body too large", b"text/plain; charset=utf-8"
        else:
            body = json.dumps({"detail": "Request body too large"}).encode()
            media = b"application/json"
        headers = [(b"content-type", media), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
