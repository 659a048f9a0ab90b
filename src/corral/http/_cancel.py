"""A closed connection cancels its run: one watcher, used by every route that runs code.

Once a request's body has been read, nothing calls ``receive`` again, so a client that hangs
up is never noticed and its run keeps a worker until the deadline. :func:`until_hangup` runs
the call beside a task that reads ``receive``: its next message is ``http.disconnect`` when the
client goes (servers also send it once the response is complete, which is after the run).

Two ways to stop the run, chosen by the caller:

* ``abandon=True`` (one-shot runs): the run's scope is cancelled; the engine kills the worker
  and counts the run ``cancelled``, and there is no result to send to nobody.
* otherwise (session runs): the ``hangup`` event handed to the call is set; pass it as the
  run's ``cancel=``, so the session records a ``cancelled`` run and restarts its interpreter.

Only routes that run code pay for the watcher (one task group per run), nothing else does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
from starlette.types import Receive

__all__ = ["Hungup", "until_hangup"]

T = TypeVar("T")


class Hungup:
    """What :func:`until_hangup` returns when the client went away first."""

    __slots__ = ()


HUNG_UP = Hungup()


class _Box(Generic[T]):
    __slots__ = ("error", "value")

    def __init__(self) -> None:
        self.value: T | Hungup = HUNG_UP
        self.error: Exception | None = None


async def until_hangup(
    receive: Receive,
    call: Callable[[anyio.Event], Awaitable[T]],
    *,
    abandon: bool = False,
    also: anyio.Event | None = None,
) -> T | Hungup:
    """``await call(hangup)``, stopped when the client disconnects.

    Args:
        receive: the request's ASGI ``receive``, its body already read.
        call: the work; ``hangup`` is set when the client disconnects (or ``also`` is set).
        abandon: cancel ``call`` outright on a hang-up instead of only setting ``hangup``.
        also: another event that sets ``hangup`` (a session being closed, say).

    Returns:
        What ``call`` returned, or ``HUNG_UP`` when it was abandoned.
    """
    hangup = anyio.Event()
    box: _Box[T] = _Box()
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hangup.set()
            if abandon:
                tg.cancel_scope.cancel()

        async def relay(event: anyio.Event) -> None:
            await event.wait()
            hangup.set()

        tg.start_soon(watch)
        if also is not None:
            tg.start_soon(relay, also)
        try:
            box.value = await call(hangup)
        except Exception as exc:  # noqa: BLE001 - re-raised below, outside the group
            box.error = exc
        tg.cancel_scope.cancel()
    if box.error is not None:
        raise box.error
    return box.value
