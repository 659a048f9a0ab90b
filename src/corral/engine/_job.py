"""Book-keeping shared by one-shot runs and session runs: validation, request, timing."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from corral._limits import Limits
from corral._mime import TEXT_PLAIN
from corral.engine._feed import NO_FEED, Feed
from corral.engine._inputs import Input, RunEvent, RunEventSink
from corral.engine._outcome import Capture, build_result
from corral.engine._result import Evidence, ExecutionResult, Outcome
from corral.engine._stream import OutputListener, OutputTap
from corral.network import NO_NETWORK, SandboxNetwork
from corral.sandbox import InputSpec, RunLimits, RunRequest, Worker

__all__ = ["Job", "cancel_on", "request_for", "validate_request", "watch_cancel"]


_MAX_ARGS = 256  # command-line arguments one run may pass to sys.argv


def validate_request(
    code: str, inputs: Sequence[Input], limits: Limits, argv: Sequence[str] | None = None
) -> str:
    """The reason a request cannot run at all, or "" when it can."""
    if len(code) > limits.code_chars:
        return f"code has {len(code)} characters; the limit is {limits.code_chars}"
    if "\x00" in code:
        return "code contains a NUL character"
    if not code.isascii():
        try:
            code.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"code is not valid Unicode: a lone surrogate at character {exc.start}"
    if len(inputs) > limits.max_sources:
        return f"{len(inputs)} inputs; at most {limits.max_sources} may be mounted"
    if len({i.id for i in inputs}) != len(inputs):
        return "input ids must be unique"
    named = [i.name for i in inputs if i.name]
    if len(set(named)) != len(named):
        twice = next(n for n in named if named.count(n) > 1)
        return f"two inputs are named {twice!r}"
    if argv is not None:
        if not all(isinstance(a, str) for a in argv):
            return "argv must be a list of strings"
        if not argv or not argv[0]:
            return "argv must start with the program's name"
        if len(argv) > _MAX_ARGS:
            return f"argv has {len(argv)} arguments; at most {_MAX_ARGS} are accepted"
        if sum(len(a) for a in argv) > limits.code_chars:
            return f"argv has more than {limits.code_chars} characters"
        if any("\x00" in a for a in argv):
            return "argv contains a NUL character"
    return ""


def request_for(
    code: str,
    inputs: Sequence[Input],
    limits: Limits,
    deadline: float,
    argv: Sequence[str] | None = None,
) -> RunRequest:
    remaining = (
        max(0.0, deadline - anyio.current_time()) if math.isfinite(deadline) else (limits.timeout)
    )
    return RunRequest(
        code=code,
        limits=RunLimits(
            memory_bytes=limits.memory_bytes,
            cpu_seconds=math.ceil(remaining) + 1,
            pids=limits.pids,
            file_bytes=limits.file_bytes,
            open_files=limits.open_files,
            max_files=limits.max_files,
            max_file_bytes=limits.max_file_bytes,
            max_display=limits.max_display,
            display_bytes=limits.display_bytes,
            output_chars=limits.output_chars,
        ),
        inputs=tuple(
            InputSpec(
                id=i.id, media_type=i.media_type, original=i.original is not None, name=i.name
            )
            for i in inputs
        ),
        argv=None if argv is None else tuple(argv),
    )


@contextlib.asynccontextmanager
async def watch_cancel(
    event: anyio.Event | None, scope: anyio.CancelScope, job: Job, *more: anyio.Event | None
) -> AsyncIterator[None]:
    """Cancel ``scope`` when ``event`` (or any of ``more``) is set, for the block's duration.

    Only then is there a watcher task: most runs are never cancelled explicitly.
    """
    events = [e for e in (event, *more) if e is not None]
    if not events:
        yield
        return
    async with anyio.create_task_group() as watcher:
        for each in events:
            watcher.start_soon(cancel_on, each, scope, job)
        try:
            yield
        finally:
            watcher.cancel_scope.cancel()


async def cancel_on(event: anyio.Event, scope: anyio.CancelScope, job: Job) -> None:
    await event.wait()
    job.cancelled_explicitly = True
    scope.cancel()


class Job:
    """Book-keeping for one run: timing, capture and metadata-only events."""

    def __init__(
        self,
        started: float,
        limits: Limits,
        on_event: RunEventSink | None,
        on_output: OutputListener | None = None,
        *,
        argv: Sequence[str] | None = None,
        tenant: str = "",
    ) -> None:
        self.started = started
        self.tenant = tenant
        self.counts_cpu = True
        """Whether the run's CPU is added to its tenant's (a session counts its own whole)."""
        self.limits = limits
        self.capture = Capture(limits, None if on_output is None else OutputTap(on_output, limits))
        self._on_event = on_event
        self.argv = argv
        self.admitted_at: float | None = None
        self.cancelled_explicitly = False
        self.worker: Worker | None = None
        self.restarted = False
        self.kept = False
        """A stopped session run whose interrupted code came back: its interpreter stays."""
        self.stop_reason = ""
        """Why the run was stopped, when the engine (not the caller) stopped it."""
        self.network: SandboxNetwork = NO_NETWORK
        """What a one-shot run may reach."""
        self.feed: Feed = NO_FEED
        self.cwd: str | None = None
        """A session run's working directory inside the sandbox (None: the session folder)."""
        """stdin and working files for a fresh worker (sessions take none)."""

    def _ms(self, since: float | None = None) -> float:
        return (time.perf_counter() - (since or self.started)) * 1000.0

    def _emit(self, **fields: Any) -> None:
        if self._on_event is not None:
            self._on_event(RunEvent(elapsed_ms=self._ms(), **fields))

    def queued(self) -> None:
        self._emit(phase="queued")

    def admitted(self) -> None:
        self.admitted_at = time.perf_counter()
        self._emit(phase="started")

    def executing(self) -> None:
        self._emit(phase="executing")

    def displayed(self, bundle: dict[str, Any]) -> None:
        if self.capture.tap is not None:
            self.capture.tap.display(bundle)

    def timing(self) -> dict[str, Any]:
        # A run that never left the queue spent all of its time there.
        admitted = time.perf_counter() if self.admitted_at is None else self.admitted_at
        queued = (admitted - self.started) * 1000
        return {"elapsed_ms": self._ms(), "queued_ms": queued, "restarted": self.restarted}

    def drain(self, worker: Worker) -> None:
        worker.kill()
        worker.drain(self.capture.stdout, self.capture.stderr)

    def stopped(self, outcome: Outcome, message: str, evidence: Evidence) -> ExecutionResult:
        if self.worker is not None and not self.kept:
            self.drain(self.worker)
        return build_result(
            outcome, self.capture, self.limits, message=message, evidence=evidence, **self.timing()
        )

    def finished(self, result: ExecutionResult) -> None:
        self._emit(
            phase="finished",
            outcome=result.outcome,
            stdout_chars=len(result.stdout),
            stderr_chars=len(result.stderr),
            result_chars=len(result.result.get(TEXT_PLAIN, "")) if result.result else 0,
            omitted_chars=sum(result.omitted.values()),
            display_count=len(result.display),
            file_count=len(result.files),
        )
