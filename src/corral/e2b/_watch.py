"""envd's watchers: ``WatchDir`` (the async SDK's stream) and ``CreateWatcher``,
``GetWatcherEvents``, ``RemoveWatcher`` (the sync SDK's ``get_new_events``).

A watcher is a command of the session, ``corral.sandbox.inside._watch`` on inotify, in the
sandbox as its user: it sees what the sandbox sees, code's files and commands' alike. The
engine reads its JSON lines and believes only their shape: a line past ``_MAX_LINE`` is
dropped, a name past ``_MAX_NAME`` or of no string, a type not envd's, are dropped. A sandbox
holds at most ``MAX_WATCHERS``; a sync watcher keeps its newest ``MAX_EVENTS`` events until
they are asked for (older ones are dropped, as a full inotify queue drops them).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import secrets
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from corral.e2b._connect import ConnectError, ConnectStream, Emit, deadline_of, read_message
from corral.e2b._contexts import HOME, SANDBOX_USER
from corral.e2b._sandboxes import MAX_TIMEOUT, Sandbox
from corral.errors import CorralError, SessionClosed, WorkerError

if TYPE_CHECKING:
    from corral.sandbox import Command

__all__ = ["MAX_EVENTS", "MAX_WATCHERS", "METHODS", "Watcher", "watch_dir"]

MAX_WATCHERS = 16
MAX_EVENTS = 10_000
MAX_HELD_CHARS = 1 << 20  # of the names one watcher keeps for its next ask
_MAX_LINE = 8192  # bytes of one line of the watcher's
_MAX_NAME = 4096
_READY_SECONDS = 10.0  # for the watcher to place its watches
_TYPES = frozenset({
    "EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE", "EVENT_TYPE_REMOVE", "EVENT_TYPE_RENAME",
    "EVENT_TYPE_CHMOD",
})  # fmt: skip
_CODES = frozenset({"not_found", "invalid_argument", "permission_denied"})
_HELPER = "corral.sandbox.inside._watch"


@dataclass(slots=True, eq=False)
class Watcher:
    """A sync SDK's watcher: its command and the events not yet asked for."""

    command: Command
    events: deque[dict[str, str]] = field(default_factory=deque)
    held: int = 0
    """Characters of the names in ``events``: the sandbox's code chooses them."""
    following: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Its reader's scope: cancelled to remove it. Only the reader closes the command's
    pipes, once it waits on them no more (a closed descriptor's number is soon reused)."""

    def keep(self, event: dict[str, str]) -> None:
        """Keep ``event`` for the next ask; past ``MAX_EVENTS`` or ``MAX_HELD_CHARS`` the
        oldest go first."""
        self.events.append(event)
        self.held += len(event["name"])
        while len(self.events) > MAX_EVENTS or self.held > MAX_HELD_CHARS:
            self.held -= len(self.events.popleft()["name"])

    def take(self) -> list[dict[str, str]]:
        """The events kept so far, which are then forgotten."""
        events, self.events, self.held = list(self.events), deque(), 0
        return events


async def _lines(command: Command) -> AsyncIterator[dict[str, Any]]:
    """The watcher's lines that are JSON objects; the rest is dropped."""
    buffer = bytearray()
    skipping = False
    while chunk := await command.read("stdout"):
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line, buffer[: end + 1] = bytes(buffer[:end]), b""
            if skipping or end > _MAX_LINE:  # a line too long, whole or its tail: dropped
                skipping = False
                continue
            # Anything in the sandbox may write here: nesting deep enough to recurse past
            # the parser's limit is no line of the watcher's either.
            with contextlib.suppress(ValueError, RecursionError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    yield parsed
        if len(buffer) > _MAX_LINE:
            buffer.clear()
            skipping = True


def _event(line: dict[str, Any]) -> dict[str, str] | None:
    name, kind = line.get("name"), line.get("type")
    if not isinstance(name, str) or len(name) > _MAX_NAME or "\0" in name:
        return None
    return {"name": name, "type": kind} if isinstance(kind, str) and kind in _TYPES else None


async def _discard(command: Command) -> None:
    while await command.read("stderr"):
        pass


async def _open(sandbox: Sandbox, message: dict[str, Any]) -> tuple[Command, AsyncIterator[Any]]:
    path = message.get("path")
    if not isinstance(path, str) or not path or "\0" in path:
        raise ConnectError("invalid_argument", "path is required")
    path = posixpath.normpath(posixpath.join(HOME, path))
    argv = [sys.executable, "-I", "-m", _HELPER]
    if message.get("recursive") is True:
        argv.append("--recursive")
    env = {"HOME": HOME, "USER": SANDBOX_USER}
    try:
        command = await sandbox.session.start_command(
            [*argv, path], env, HOME, cpu_seconds=MAX_TIMEOUT
        )
    except SessionClosed:
        raise ConnectError("unavailable", f"The sandbox {sandbox.id} was not found") from None
    except WorkerError as exc:
        raise ConnectError("resource_exhausted", f"the watcher did not start: {exc}") from None
    command.close_stdin()
    lines = _lines(command)
    first: dict[str, Any] | None = None
    with anyio.move_on_after(_READY_SECONDS):
        first = await anext(lines, None)
    if first is None or first.get("ready") is not True:
        command.close()
        said = first.get("error") if first is not None else None
        code = first.get("code") if first is not None else None
        if isinstance(said, str) and isinstance(code, str) and code in _CODES:
            raise ConnectError(str(code), said[:_MAX_NAME])
        raise ConnectError("internal", "the watcher did not start")
    return command, lines


async def watch_dir(request: Request, sandbox: Sandbox) -> Response:
    """The async SDK's stream: ``start``, then each event as it comes."""
    try:
        deadline = deadline_of(request)
        message = await read_message(request)
        command, lines = await _open(sandbox, message)
    except ConnectError as exc:
        return exc.response()

    async def produce(emit: Emit) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_discard, command)
                await emit({"start": {}})
                async for line in lines:
                    if (event := _event(line)) is not None:
                        await emit({"filesystem": event})
                tg.cancel_scope.cancel()
            raise ConnectError("unavailable", "the watcher ended with its sandbox")
        finally:
            command.close()

    return ConnectStream(produce, deadline)


async def _follow(watcher: Watcher, lines: AsyncIterator[Any]) -> None:
    try:
        with watcher.following:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_discard, watcher.command)
                async for line in lines:
                    if (event := _event(line)) is not None:
                        watcher.keep(event)
                tg.cancel_scope.cancel()
    finally:
        watcher.command.close()


def _watchers(sandbox: Sandbox) -> dict[str, Watcher]:
    found: dict[str, Watcher] = sandbox.watchers
    return found


async def create_watcher(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    watchers = _watchers(sandbox)
    if len(watchers) >= MAX_WATCHERS:
        raise ConnectError("resource_exhausted", f"the sandbox has {MAX_WATCHERS} watchers")
    command, lines = await _open(sandbox, message)
    watcher = Watcher(command)
    watcher_id = secrets.token_hex(8)
    try:
        sandbox.session.background(lambda: _follow(watcher, lines))
    except CorralError:
        command.close()
        raise ConnectError("unavailable", f"The sandbox {sandbox.id} was not found") from None
    watchers[watcher_id] = watcher
    return {"watcherId": watcher_id}


def _watcher(sandbox: Sandbox, message: dict[str, Any]) -> tuple[str, Watcher]:
    watcher_id = message.get("watcherId")
    found = _watchers(sandbox).get(watcher_id) if isinstance(watcher_id, str) else None
    if found is None or not isinstance(watcher_id, str):
        raise ConnectError("not_found", f"watcher {watcher_id!r} not found")
    return watcher_id, found


async def get_watcher_events(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    _, watcher = _watcher(sandbox, message)
    return {"events": watcher.take()}


async def remove_watcher(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    watcher_id, watcher = _watcher(sandbox, message)
    del _watchers(sandbox)[watcher_id]
    watcher.command.send_signal(signal.SIGKILL)
    watcher.following.cancel()
    return {}


METHODS: dict[str, Callable[[Sandbox, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "CreateWatcher": create_watcher,
    "GetWatcherEvents": get_watcher_events,
    "RemoveWatcher": remove_watcher,
}
