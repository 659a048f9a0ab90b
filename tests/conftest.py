"""Fixtures every test directory shares: a clean environment, the anyio backend, and the
skip for real-isolation tests on hosts that cannot build the sandbox (marked by hand, or
because they use a fixture that starts the real sandbox)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest

from corral.errors import IsolationError
from corral.sandbox import DoctorReport, doctor
from corral.sandbox.host._cgroups import discover

_SCRUBBED_PREFIXES = ("CORRAL_", "MISTRAL_")
REAL_SANDBOX_FIXTURES = frozenset({"real_engine", "one_lane"})
"""Fixtures that start corral's real sandbox: a test that uses one, directly or through
another fixture, is marked ``isolation``."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope, so a module can share one started Engine (about 1 s to start) between
    # its tests; directories that want function scope override this fixture.
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's configuration or API key must never reach a test.
    for name in list(os.environ):
        if name.startswith(_SCRUBBED_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session", autouse=True)
def _no_cgroup_left_behind() -> Iterator[None]:
    """Every engine a test starts removes the cgroups it made, also when the test fails."""
    yield
    try:
        parents = [h.path for h in discover()]
    except (IsolationError, OSError):
        return
    mine = f"corral-{os.getpid()}-"
    left = [f"{p}/{name}" for p in parents for name in os.listdir(p) if name.startswith(mine)]
    assert not left, f"cgroups left behind: {left}"


MAX_TEST_PROCESSES = 4
"""``-n auto``'s bound: each test process starts engines of its own (zygotes, pools, servers),
so past a few the machine's memory and its timing-sensitive tests pay more than they gain."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """A test process per CPU this process may run on, at most ``MAX_TEST_PROCESSES``."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_TEST_PROCESSES))


@functools.cache
def _doctor_report() -> DoctorReport:
    return doctor()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``isolation`` every test that reaches the real sandbox through its fixtures,
    before ``-m`` selects by marker."""
    for item in items:
        if REAL_SANDBOX_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.isolation)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests marked ``isolation`` with `corral doctor`'s reason when the host lacks a
    feature; never loosen isolation to make them pass."""
    if item.get_closest_marker("isolation") is None:
        return
    report = _doctor_report()
    if not report.ok:
        pytest.skip("this host cannot build corral's sandbox: " + "; ".join(report.problems))
