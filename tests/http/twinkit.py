"""Stand-ins for the sandbox's in-process twin: code the twin cannot run as the sandbox does
(it would block the event loop, or must be stopped while it runs) is played by a script with
the same observable behaviour; any other code runs in process with the real cell semantics.
And the mock clock, for tests whose subject is time."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import ParamSpec

import anyio
import anyio.from_thread
from trio.testing import MockClock

from corral.sandbox import Handler, RunRequest, TwinIO, TwinReply, run_in_process

P = ParamSpec("P")
Script = Callable[[RunRequest, TwinIO], Awaitable[TwinReply]]
"""What the twin does in place of one exact piece of code."""


def standing_in(scripts: Mapping[str, Script]) -> Handler:
    """A twin handler that plays ``scripts[code]`` for those codes and runs the rest."""

    async def handle(request: RunRequest, io: TwinIO) -> TwinReply:
        return await scripts.get(request.code, run_in_process)(request, io)

    return handle


def runs_until_stopped(stdout: str = "") -> Script:
    """Code that prints ``stdout``, then runs until its deadline, a cancel or a kill."""

    async def script(request: RunRequest, io: TwinIO) -> TwinReply:
        await io.stdout(stdout)
        await anyio.sleep_forever()
        raise AssertionError("never reached: only a stop ends it")

    return script


def sleeps(seconds: float, stdout: str = "") -> Script:
    """Code that sleeps ``seconds`` (the twin's loop runs on meanwhile), then prints."""

    async def script(request: RunRequest, io: TwinIO) -> TwinReply:
        await anyio.sleep(seconds)
        await io.stdout(stdout)
        return TwinReply()

    return script


def crashes() -> Script:
    """Code that ends its own process mid-run (``os._exit``)."""

    async def script(request: RunRequest, io: TwinIO) -> TwinReply:
        return TwinReply(crashed=True)

    return script


def on_mock_clock(test: Callable[P, Awaitable[None]]) -> Callable[P, None]:
    """Run an async test's body on trio under a ``MockClock`` that jumps whenever every task
    waits, so the twin's deadlines and the stand-ins' sleeps take no real time. The body runs
    on an event loop of its own, in a thread (anyio's pytest plugin keeps one loop at a time,
    and a module's shared engine holds it on asyncio), so it builds its own engine
    (``engine_factory``)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        clock = MockClock(autojump_threshold=0)
        with anyio.from_thread.start_blocking_portal("trio", {"clock": clock}) as portal:
            portal.call(functools.partial(test, *args, **kwargs))

    return run
