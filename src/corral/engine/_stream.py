"""Output delivered while a run executes: events, their ceilings, and the async iterator.

What is streamed obeys the run's ceilings: per channel at most ``output_chars`` characters
(the head the final result keeps too), across stdout and stderr at most ``output_bytes``
UTF-8 bytes, and the display bundles the worker sent within their count and byte bounds.
Past a ceiling a channel falls silent; the final result says what was cut. Streaming never
changes the final result. Each channel is in order; stdout, stderr and display come on
separate pipes and the protocol socket, so their interleaving is as the engine read them.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.abc

from corral._limits import Limits
from corral.engine._fit import STREAM_CUT
from corral.engine._result import ExecutionResult
from corral.errors import EngineClosed

__all__ = ["OutputEvent", "OutputListener", "OutputTap", "iterate"]

logger = logging.getLogger("corral.engine")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputEvent:
    """A piece of a run's output, delivered while the run executes."""

    kind: Literal["stdout", "stderr", "display"]
    text: str = ""
    """A stdout or stderr chunk, already within the ceilings."""
    data: Mapping[str, Any] | None = None
    """For ``display``: one MIME bundle, ``{"image/png": "<base64>", ...}``."""


OutputListener = Callable[[OutputEvent], None]
"""Called with each OutputEvent, on the engine's event loop; it must not block."""


class OutputTap:
    """Forwards one run's output to a listener within the run's ceilings.

    The per-channel character ceiling is the fitter's head (only head text reaches ``text``);
    the byte budget is shared by stdout and stderr here. A listener that raises is logged and
    dropped: a caller's callback never decides a run's outcome.
    """

    __slots__ = ("_bytes_left", "_cut", "_listener")

    def __init__(self, listener: OutputListener, limits: Limits) -> None:
        self._listener: OutputListener | None = listener
        self._bytes_left = limits.output_bytes
        self._cut: set[str] = set()
        """Channels whose listener was told that streaming stopped (``STREAM_CUT``)."""

    def text(self, kind: Literal["stdout", "stderr"], chunk: str) -> None:
        if self._listener is None or not chunk or kind in self._cut:
            return
        if chunk == STREAM_CUT or self._bytes_left <= 0:
            self._say_cut(kind)
            return
        data = chunk.encode("utf-8", "backslashreplace")
        short = len(data) > self._bytes_left
        if short:
            chunk = data[: self._bytes_left].decode("utf-8", "ignore")
            data = chunk.encode()
        self._bytes_left -= len(data)
        if chunk:
            self._deliver(OutputEvent(kind=kind, text=chunk))
        if short:
            self._say_cut(kind)

    def _say_cut(self, kind: Literal["stdout", "stderr"]) -> None:
        """Tell the listener, once per channel and outside the byte budget, where its
        stream stops: the result keeps more (its tail) and marks the cut itself."""
        self._cut.add(kind)
        if self._listener is not None:
            self._deliver(OutputEvent(kind=kind, text=STREAM_CUT))

    def display(self, bundle: Mapping[str, Any]) -> None:
        if self._listener is not None:
            self._deliver(OutputEvent(kind="display", data=bundle))

    def _deliver(self, event: OutputEvent) -> None:
        assert self._listener is not None
        try:
            self._listener(event)
        except Exception:
            logger.exception("an on_output listener failed; it gets no more output")
            self._listener = None


RunWithListener = Callable[[OutputListener, anyio.Event], Awaitable[ExecutionResult]]


async def iterate(
    task_group: anyio.abc.TaskGroup, run: RunWithListener, cancel: anyio.Event | None = None
) -> AsyncGenerator[OutputEvent | ExecutionResult, None]:
    """Yield a run's OutputEvents as they come, then its ExecutionResult.

    The run goes in ``task_group`` (the engine's), not in this generator: a task group must
    not stay open across a ``yield``. Leaving the loop early cancels the run. The buffer is
    unbounded but holds at most what the run's ceilings let through.

    Raises:
        EngineClosed: the engine stopped before the run produced its result.
    """
    send, receive = anyio.create_memory_object_stream[OutputEvent | ExecutionResult](math.inf)
    stop = anyio.Event()
    failure: list[BaseException] = []

    def listen(item: OutputEvent | ExecutionResult) -> None:
        # The consumer may have left the loop while the run still winds down.
        with contextlib.suppress(anyio.BrokenResourceError):
            send.send_nowait(item)

    async def produce() -> None:
        with send:
            async with anyio.create_task_group() as relay:
                if cancel is not None:
                    relay.start_soon(_relay, cancel, stop)
                try:
                    result = await run(listen, stop)
                except Exception as exc:  # noqa: BLE001 - handed to the consumer, not the engine
                    failure.append(exc)
                    return
                finally:
                    relay.cancel_scope.cancel()
            listen(result)

    task_group.start_soon(produce)
    finished = False
    try:
        with receive:
            async for item in receive:
                finished = isinstance(item, ExecutionResult)
                yield item
    finally:
        if not finished:
            stop.set()
    if failure:
        raise failure[0]
    if not finished:
        raise EngineClosed("the engine stopped before the run finished")


async def _relay(source: anyio.Event, target: anyio.Event) -> None:
    await source.wait()
    target.set()
