"""Engines for the engine's tests: the sandbox's in-process twin (``engine``) for the logic
above the sandbox, and one real engine per module (``real_engine``; starting the zygote costs
about a second) for what happens inside it. A test that takes ``real_engine`` is marked
``isolation``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral._limits import Limits
from corral.engine import Engine
from tests.engine.twinkit import mark_real, twin_engine

LIMITS = Limits(timeout=10)
"""Generous: these tests prove what a run can see, not how fast it is."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_real(items, Path(__file__).parent, {"real_engine"})


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    async with twin_engine(capacity=2, limits=LIMITS) as started:
        yield started


@pytest.fixture(scope="module")
async def real_engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=LIMITS) as started:
        yield started
