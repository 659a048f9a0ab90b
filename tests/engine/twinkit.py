"""Engines for the tests: the sandbox's in-process twin under logic above the sandbox, real
workers for what happens inside it.

A test that takes a real-engine fixture is marked ``isolation`` by its directory's conftest
(:func:`mark_real`), so ``-m "not isolation"`` leaves it out and a host that cannot build the
sandbox skips it with ``corral doctor``'s reason. The twin runs code in this process with the
real cell semantics; code that would block the event loop (a busy loop, a long sleep) cannot run
there, and a :class:`StandIn` awaits in its place where a test is about the engine's side of it.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from corral.engine import Engine
from corral.sandbox import (
    Handler,
    InProcessBackend,
    RunRequest,
    TwinIO,
    TwinReply,
    run_in_process,
)

__all__ = ["SPIN", "StandIn", "in_a_fresh_interpreter", "mark_real", "standing_in", "twin_engine"]

SPIN = "while True: pass"
"""Code that never ends by itself and never yields: in a worker only a kill stops it; on the
twin it needs a :class:`StandIn`."""

_INTERPRETER_WARNINGS: tuple[tuple[warnings._ActionKind, type[Warning], str], ...] = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
)
"""A fresh interpreter's warning filters, first match first, as a worker's code meets them."""


def mark_real(items: list[pytest.Item], here: Path, fixtures: Collection[str]) -> None:
    """Marks ``isolation`` each test under ``here`` that uses one of ``fixtures`` (real
    engines), directly or through another fixture."""
    for item in items:
        used = getattr(item, "fixturenames", ())
        if here in item.path.parents and any(name in used for name in fixtures):
            item.add_marker(pytest.mark.isolation)


async def in_a_fresh_interpreter(request: RunRequest, io: TwinIO) -> TwinReply:
    """The twin's real cell, under a fresh interpreter's warning filters rather than this
    test run's (which turn every warning into an error): code that leaves a file unclosed
    fails no test, and a warning it raises goes to its stderr, as in a worker."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category, module in reversed(_INTERPRETER_WARNINGS):
            warnings.filterwarnings(action, category=category, module=module)
        return await run_in_process(request, io)


@dataclass(frozen=True, slots=True)
class StandIn:
    """What the twin does in place of a program it cannot run in process: writes ``prints``
    to stdout, then waits ``seconds`` (until it is stopped when None) and ends without a
    result. It waits in the event loop, so a deadline, a cancel or a kill stops it."""

    prints: str = ""
    seconds: float | None = None


def standing_in(stand_ins: Mapping[str, StandIn]) -> Handler:
    """The real cell in process, except for the programs in ``stand_ins`` (exact code)."""

    async def handle(request: RunRequest, io: TwinIO) -> TwinReply:
        stand_in = stand_ins.get(request.code)
        if stand_in is None:
            return await in_a_fresh_interpreter(request, io)
        await io.stdout(stand_in.prints)
        if stand_in.seconds is None:
            await anyio.sleep_forever()
        else:
            await anyio.sleep(stand_in.seconds)
        return TwinReply()

    return handle


def twin_engine(handler: Handler | None = None, **options: Any) -> Engine:
    """An Engine on the in-process twin (no isolation at all); code runs in this process with
    the real cell semantics unless ``handler`` says otherwise."""
    return Engine(backend=InProcessBackend(handler or in_a_fresh_interpreter), **options)
