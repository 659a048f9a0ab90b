"""One agent run: its call quota, its sources, its progress sink and its cancellation."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio

from corral.engine import Outcome
from corral.errors import QuotaExceeded
from corral.sources import SourceRegistry
from corral.tools._progress import ProgressEvent, ProgressReporter, ProgressSink

__all__ = ["DEFAULT_MAX_CALLS", "Invocation", "admit_call", "start_call"]

logger = logging.getLogger("corral.tools")

DEFAULT_MAX_CALLS = 10
"""Code-running calls one invocation may make (``maxCalls``, docs/code-interpreter.md §1)."""

Cleanup = Callable[[], Awaitable[None]]


class Invocation:
    """The state one agent run owns, and nothing another run can reach.

    Tools read it from :attr:`ToolContext.invocation <corral.tools.ToolContext.invocation>`.
    Each invocation has its own :class:`~corral.sources.SourceRegistry` (an id minted here
    resolves nowhere else), its own quota and its own cancel event; no attribute refers to
    another invocation, and nothing is shared through class attributes.

    Args:
        max_calls: code-running calls this run may make; each admitted call spends one,
            whether it then succeeds, fails, waits in the queue or times out. None sets no
            cap (an MCP session, which lasts as long as its client).
        sources: the run's source inventory; a fresh, empty one by default.
        progress: receives every metadata-only progress event of this run's calls.

    Use ``async with Invocation() as invocation:`` (or call :meth:`aclose`) so resources
    tools attach to it, such as a ``code_session`` interpreter, are released.
    """

    def __init__(
        self,
        *,
        max_calls: int | None = DEFAULT_MAX_CALLS,
        sources: SourceRegistry | None = None,
        progress: ProgressSink | None = None,
    ) -> None:
        if max_calls is not None and (
            isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0
        ):
            raise ValueError(f"max_calls must be None or a non-negative integer, not {max_calls!r}")
        self.id = "inv_" + secrets.token_urlsafe(9)
        """A random label for logs; it grants nothing."""
        self.max_calls = max_calls
        self.sources = sources if sources is not None else SourceRegistry()
        self.progress = progress
        self.cancelled = anyio.Event()
        """Set by :meth:`cancel`; passed to ``Engine.run(cancel=...)`` by every call."""
        self.state: dict[str, Any] = {}
        """Per-invocation state of tools, keyed by tool name (e.g. a code session)."""
        self._used = 0
        self._listeners: list[Callable[[], None]] = []
        self._cleanups: list[Cleanup] = []
        self._closed = False

    def __repr__(self) -> str:
        cap = "unlimited" if self.max_calls is None else self.max_calls
        return f"<Invocation {self.id} calls {self._used}/{cap}>"

    @property
    def calls_used(self) -> int:
        """Admitted calls so far."""
        return self._used

    @property
    def remaining(self) -> int | None:
        """Calls this run may still make; None when there is no cap."""
        if self.max_calls is None:
            return None
        return max(0, self.max_calls - self._used)

    @property
    def closed(self) -> bool:
        return self._closed

    def admit(self) -> int:
        """Spend one call of the quota, before any work.

        Returns:
            The 1-based number of this call within the invocation.

        Raises:
            QuotaExceeded: the quota is spent; nothing was spent by this attempt.
        """
        if self.max_calls is not None and self._used >= self.max_calls:
            raise QuotaExceeded(f"this run has used all {self.max_calls} of its code-running calls")
        self._used += 1
        for listener in list(self._listeners):
            listener()
        return self._used

    def add_quota_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every admitted call (e.g. to refresh a budget text).

        Returns:
            A function that removes the listener.
        """
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def report(self, event: ProgressEvent) -> None:
        """Hand ``event`` to this run's progress sink; a failing sink never fails a call."""
        if self.progress is None:
            return
        try:
            self.progress(event)
        except Exception:  # a display sink is a boundary: its bugs must not end the run
            logger.exception("progress sink of %s raised", self.id)

    def cancel(self) -> None:
        """Cancel every call of this run, queued or running; later calls end cancelled too.

        Cancellation never resurrects: a queued call that sees it never starts Python.
        """
        self.cancelled.set()

    def on_close(self, cleanup: Cleanup) -> None:
        """Run ``await cleanup()`` when the invocation closes (last registered, first run)."""
        self._cleanups.append(cleanup)

    async def aclose(self) -> None:
        """Cancel in-flight calls and release what tools attached; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.cancel()
        with anyio.CancelScope(shield=True):
            while self._cleanups:
                cleanup = self._cleanups.pop()
                try:
                    await cleanup()
                except Exception:  # one failing cleanup must not leak the others
                    logger.exception("cleanup of %s raised", self.id)

    async def __aenter__(self) -> Invocation:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def start_call(
    tool: str, invocation: Invocation, forward: Callable[[dict[str, Any]], None] | None
) -> ProgressReporter:
    """A reporter for one call: to the invocation's sink, and to ``forward`` when given."""
    sinks: list[ProgressSink] = [invocation.report]
    if forward is not None:
        sinks.append(lambda event: forward(dict(event)))
    reporter = ProgressReporter(tool, sinks)
    reporter.requested()
    return reporter


def admit_call(invocation: Invocation, reporter: ProgressReporter) -> tuple[Outcome, str] | None:
    """Spend one call of the budget for ``reporter``'s call, or say why not.

    Returns None once admitted, else the (outcome, message) the call ends with.
    """
    if invocation.cancelled.is_set():
        return "cancelled", "the run was cancelled"
    try:
        reporter.call = invocation.admit()
    except QuotaExceeded as exc:
        return "quota_exceeded", str(exc)
    return None
