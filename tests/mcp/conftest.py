"""Engines for the MCP tests: the sandbox's in-process twin under the protocol, tools and
quotas (``engine``), real workers where a test needs them (``real_engine``, which marks the
test ``isolation``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral import Limits
from corral.engine import Engine
from tests.engine.twinkit import SPIN, StandIn, mark_real, standing_in, twin_engine

LIMITS = Limits(timeout=20)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_real(items, Path(__file__).parent, {"real_engine"})


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    """The twin; ``SPIN``, which never ends by itself, waits there until it is stopped."""
    handler = standing_in({SPIN: StandIn()})
    async with twin_engine(handler, capacity=2, limits=LIMITS) as started:
        yield started


@pytest.fixture(scope="module")
async def real_engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=LIMITS) as started:
        yield started
