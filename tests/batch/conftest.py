"""Local batches run on the sandbox's in-process twin unless a test takes ``real_workers``
(which marks it ``isolation``); Ray batches (test_ray.py) need real workers on every node."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from corral.batch import _local
from tests.engine.twinkit import SPIN, StandIn, mark_real, standing_in, twin_engine


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_real(items, Path(__file__).parent, {"real_workers"})


@pytest.fixture(autouse=True)
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_batch``'s engine on the twin, for every test that does not take real workers."""
    if "real_workers" not in request.fixturenames:
        handler = standing_in({SPIN: StandIn()})
        monkeypatch.setattr(_local, "Engine", functools.partial(twin_engine, handler))


@pytest.fixture
def real_workers() -> None:
    """``run_batch``'s engine as it is: real sandboxed workers."""
