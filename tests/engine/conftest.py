"""One real Engine per test module (starting the zygote costs about a second)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral._limits import Limits
from corral.engine import Engine

LIMITS = Limits(timeout=10)
"""Generous: these tests prove what a run can see, not how fast it is."""


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=LIMITS) as started:
        yield started
