"""A sandbox's processes, followed for as long as they run, whoever is attached to them.

A process started by ``process.Process/Start`` outlives that stream, as envd's do: the SDK's
``background=True`` handle may ``disconnect()``, a client may go away, and the process runs
on; ``Connect`` attaches to it again by pid, ``List`` shows it, ``SendSignal`` ends it, and it
ends with its sandbox (or when the ``Connect-Timeout-Ms`` of its ``Start`` passes, as envd
ends it). One task per process (the session's background work) reads its output for its
whole life and hands each chunk to the streams attached at that moment. With none attached
the chunk is dropped, as envd drops it (its ``Connect`` replays nothing to the SDK), so a
process nobody follows is kept at no cost beyond its pipes: nothing of its output is held.
An attached stream that reads slowly holds the process back once ``ATTACHED_CHUNKS`` chunks
wait for it, as envd's fan-out waits for each subscriber.
"""

from __future__ import annotations

import base64
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from corral.errors import WorkerError

if TYPE_CHECKING:
    # Only its type: commands are started through the engine's Session.start_command.
    from corral.sandbox import Command

__all__ = ["ATTACHED_CHUNKS", "MAX_ATTACHED", "Event", "Process", "TooManyAttached"]

ATTACHED_CHUNKS = 16
"""Output chunks (64 KiB each at most) that may wait for one attached stream."""
MAX_ATTACHED = 8
"""Streams attached to one process at once; ``Connect`` past it is refused."""


class TooManyAttached(Exception):
    """The process already has ``MAX_ATTACHED`` streams attached."""


Event = dict[str, Any]
"""One ``ProcessEvent`` message, as proto-JSON."""


def end_event(code: int) -> Event:
    status = f"exit status {code}" if code >= 0 else f"signal: {signal.Signals(-code).name}"
    end = {"exitCode": code if code >= 0 else -1, "exited": code >= 0, "status": status}
    return {"event": {"end": end}}


@dataclass(slots=True, eq=False)
class Process:
    """A started command, its configuration as ``List`` reports it, and who is attached."""

    command: Command
    cmd: str
    args: list[str]
    envs: dict[str, str]
    cwd: str
    tag: str | None
    pty: bool = False
    """It runs on a terminal: its stdout is the terminal's output (``data.pty``)."""
    end: Event | None = None
    """The end event, once the process has exited and its output is read."""
    _attached: list[MemoryObjectSendStream[Event]] = field(default_factory=list)
    _finished: bool = False

    @property
    def pid(self) -> int:
        return self.command.pid

    def attach(self) -> MemoryObjectReceiveStream[Event]:
        """A stream of this process's output from now on; it ends when the process does
        (``end`` is then set) or when the process stops being followed.

        Raises:
            TooManyAttached: ``MAX_ATTACHED`` streams are attached already.
        """
        if len(self._attached) >= MAX_ATTACHED:
            raise TooManyAttached(f"{MAX_ATTACHED} streams are attached to process {self.pid}")
        sender, receiver = anyio.create_memory_object_stream[Event](ATTACHED_CHUNKS)
        if self._finished:
            sender.close()
        else:
            self._attached.append(sender)
        return receiver

    async def follow(self, lifetime: float | None, ended: Callable[[Process], None]) -> None:
        """Read the output until the process ends (killing it after ``lifetime`` seconds);
        then release it and call ``ended``. Cancelling this kills the process."""
        try:
            async with anyio.create_task_group() as timer:
                if lifetime is not None:
                    timer.start_soon(self._kill_after, lifetime)
                async with anyio.create_task_group() as pumps:
                    pumps.start_soon(self._pump, "stdout")
                    pumps.start_soon(self._pump, "stderr")
                with contextlib.suppress(WorkerError):  # the session ended under it
                    self.end = end_event(await self.command.wait())
                timer.cancel_scope.cancel()
        finally:
            self.release()
            ended(self)

    def release(self) -> None:
        """End every attached stream and kill the process, if it still runs; idempotent."""
        self._finished = True
        for sender in self._attached:
            sender.close()
        self._attached.clear()
        self.command.close()

    async def _kill_after(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        self.command.send_signal(signal.SIGKILL)

    async def _pump(self, stream: str) -> None:
        while chunk := await self.command.read(stream):
            if not self._attached:
                continue  # nobody to hand it to: dropped unencoded
            kind = "pty" if self.pty and stream == "stdout" else stream
            event = {"event": {"data": {kind: base64.b64encode(chunk).decode()}}}
            for sender in list(self._attached):
                try:
                    await sender.send(event)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    with contextlib.suppress(ValueError):  # the other pump removed it
                        self._attached.remove(sender)
