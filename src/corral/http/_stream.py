"""NDJSON output streams: one JSON object a line, written as the run produces it.

``{"type": "stdout"|"stderr", "text"}`` and ``{"type": "display", "data": {bundle}}`` while the
code runs, then exactly one ``{"type": "result", "result": {...}}``, or, when the request fails
after the stream began (its session closed under it, say), one
``{"type": "error", "error": {"type", "message"}}``. The engine's listener is synchronous, so
events go through an in-memory queue; its total is bounded by the run's own output ceilings
(what is streamed is what fits), never by the sandbox's word. Events ready together leave in
one write; asyncio sets ``TCP_NODELAY`` on every TCP transport, so a write is a packet now.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from fastapi import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from corral.engine import ExecutionResult, OutputEvent, OutputListener
from corral.http._errors import error_body

__all__ = ["NDJSON", "Listener", "NdjsonRun", "event_line"]

logger = logging.getLogger("corral.http")

NDJSON = "application/x-ndjson"


Listener = OutputListener


def _line(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def event_line(event: OutputEvent) -> bytes:
    """The NDJSON line of one output event."""
    if event.kind == "display":
        return _line({"type": "display", "data": dict(event.data or {})})
    return _line({"type": event.kind, "text": event.text})


class NdjsonRun(Response):
    """Run the code when the response starts, streaming its output, then the result."""

    media_type = NDJSON

    def __init__(
        self,
        run: Callable[[Listener, anyio.Event], Awaitable[ExecutionResult]],
        render: Callable[[ExecutionResult], Mapping[str, Any]],
        *,
        abandon: bool,
        also: anyio.Event | None = None,
    ) -> None:
        """``run(listener, hangup)`` runs the code; the rest as for ``until_hangup``."""
        super().__init__(media_type=NDJSON)
        self._run = run
        self._render = render
        self._abandon = abandon
        self._also = also

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", NDJSON.encode()),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        # Unbounded only in count: every event is already within the run's ceilings.
        lines, pending = anyio.create_memory_object_stream[bytes](math.inf)
        hangup = anyio.Event()
        finished = done = False

        def listen(event: OutputEvent) -> None:
            # Closed: the run already ended, or nobody reads any more.
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                lines.send_nowait(event_line(event))

        # The hang-up watcher lives in this task group (see _cancel.py for why and how).
        async with anyio.create_task_group() as tg, pending:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                hangup.set()
                if self._abandon:
                    tg.cancel_scope.cancel()

            async def relay(event: anyio.Event) -> None:
                await event.wait()
                hangup.set()

            async def produce() -> None:
                nonlocal finished
                with lines:
                    last = await self._finish(listen, hangup)
                    finished = True
                    lines.send_nowait(last)

            tg.start_soon(watch)
            if self._also is not None:
                tg.start_soon(relay, self._also)
            tg.start_soon(produce)
            async for first in pending:
                batch = [first]
                while True:
                    try:
                        batch.append(pending.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                done = finished and pending.statistics().current_buffer_used == 0
                body = b"".join(batch)
                await send({"type": "http.response.body", "body": body, "more_body": not done})
                if done:
                    break
            tg.cancel_scope.cancel()  # the watcher: the answer is complete
        if not done and not hangup.is_set():
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _finish(self, listen: Listener, hangup: anyio.Event) -> bytes:
        try:
            result = await self._run(listen, hangup)
        except StarletteHTTPException as exc:
            default = "not_found" if exc.status_code == 404 else "error"
            kind = getattr(exc, "kind", None) or default
            return _line({"type": "error", **error_body(kind, str(exc.detail))})
        except Exception:
            logger.exception("streamed run failed")
            return _line({"type": "error", **error_body("internal", "Internal error")})
        return _line({"type": "result", "result": self._render(result)})
