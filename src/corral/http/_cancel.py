"""A closed connection cancels its run: one ASGI watcher for every route.

Once a request's body has been read, nothing in the app calls ``receive`` again, so a client
that goes away is never noticed: its run keeps a worker until the deadline. The watcher
reads ``receive`` itself (one message ahead of the app, so uploads keep their backpressure)
and, when ``http.disconnect`` arrives, sets the request's cancel event, which handlers pass
to the engine as ``cancel=``. The app keeps seeing every message in order, the disconnect
included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio
from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CancelOnDisconnect", "cancel_event"]

_SCOPE_KEY = "corral.cancel"
_AHEAD = 1  # messages read before the app asks: enough to see the end of the body


class CancelOnDisconnect:
    """Set ``scope["corral.cancel"]`` when the client disconnects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cancel = anyio.Event()
        to_app, from_watcher = anyio.create_memory_object_stream[Message](_AHEAD)

        async def watch() -> None:
            async with to_app:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        cancel.set()
                    with contextlib.suppress(anyio.BrokenResourceError):
                        await to_app.send(message)
                    if message["type"] == "http.disconnect":
                        return

        async def relay(event: anyio.Event) -> None:
            await event.wait()
            cancel.set()

        async def app_receive() -> Message:
            try:
                return await from_watcher.receive()
            except anyio.EndOfStream:
                return {"type": "http.disconnect"}

        async with anyio.create_task_group() as tg, from_watcher:

            def also(event: anyio.Event) -> None:
                tg.start_soon(relay, event)

            scope[_SCOPE_KEY] = _Link(cancel, also)
            tg.start_soon(watch)
            try:
                await self.app(scope, app_receive, send)
            finally:
                tg.cancel_scope.cancel()


class _Link:
    __slots__ = ("also", "event")

    def __init__(self, event: anyio.Event, also: Callable[[anyio.Event], None]) -> None:
        self.event = event
        self.also = also


def cancel_event(request: Request, *also: anyio.Event) -> anyio.Event:
    """The event set when this request's client disconnects, or when one of ``also`` is set.

    Outside :class:`CancelOnDisconnect` (an app mounted without it), only ``also`` count.
    """
    link = request.scope.get(_SCOPE_KEY)
    if not isinstance(link, _Link):
        return also[0] if also else anyio.Event()
    for event in also:
        link.also(event)
    return link.event
