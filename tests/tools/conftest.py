"""Tests here run on the sandbox's in-process twin; one that takes ``real_engine`` needs real
workers and is marked ``isolation``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.twinkit import mark_real


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_real(items, Path(__file__).parent, {"real_engine"})
