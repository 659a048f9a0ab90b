"""Fixtures every test directory shares: a clean environment, the anyio backend, and the
skip for real-isolation tests on hosts that cannot build the sandbox."""

from __future__ import annotations

import functools
import os

import pytest

from corral.sandbox import DoctorReport, doctor

_SCRUBBED_PREFIXES = ("CORRAL_", "MISTRAL_")


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


@functools.cache
def _doctor_report() -> DoctorReport:
    return doctor()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests marked ``isolation`` with `corral doctor`'s reason when the host lacks a
    feature; never loosen isolation to make them pass."""
    if item.get_closest_marker("isolation") is None:
        return
    report = _doctor_report()
    if not report.ok:
        pytest.skip("this host cannot build corral's sandbox: " + "; ".join(report.problems))
