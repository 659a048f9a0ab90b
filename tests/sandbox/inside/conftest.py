"""An engine of one worker, for what happens from one case of a case server to the next."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral._limits import Limits
from corral.engine import Engine


@pytest.fixture(scope="module")
async def one_lane() -> AsyncIterator[Engine]:
    """A batch's cases run one after another on its one lane: each case after the first
    follows the one before it on the same case server, or on the server that replaced it."""
    async with Engine(capacity=1, limits=Limits(timeout=10)) as started:
        yield started
