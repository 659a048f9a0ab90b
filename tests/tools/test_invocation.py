"""Invocation: the call quota, isolation between runs, cancellation and cleanup."""

from __future__ import annotations

import pytest

from corral.errors import QuotaExceeded, SourceNotFound
from corral.sources import SourceRegistry
from corral.tools import DEFAULT_MAX_CALLS, Invocation, ProgressEvent

pytestmark = pytest.mark.anyio


def test_default_quota_is_ten() -> None:
    invocation = Invocation()
    assert DEFAULT_MAX_CALLS == 10
    assert invocation.max_calls == 10
    assert invocation.remaining == 10
    assert invocation.calls_used == 0


def test_admit_spends_one_call_each_and_numbers_them() -> None:
    invocation = Invocation(max_calls=3)
    assert [invocation.admit() for _ in range(3)] == [1, 2, 3]
    assert invocation.remaining == 0
    assert invocation.calls_used == 3


def test_past_the_quota_admission_raises_and_spends_nothing() -> None:
    invocation = Invocation(max_calls=1)
    invocation.admit()
    for _ in range(3):
        with pytest.raises(QuotaExceeded, match="all 1 of its"):
            invocation.admit()
    assert invocation.calls_used == 1
    assert invocation.remaining == 0


def test_a_zero_quota_admits_nothing() -> None:
    with pytest.raises(QuotaExceeded):
        Invocation(max_calls=0).admit()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_max_calls_must_be_a_non_negative_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_calls"):
        Invocation(max_calls=bad)  # type: ignore[arg-type]


def test_quota_listeners_run_after_each_admission_until_removed() -> None:
    invocation = Invocation(max_calls=5)
    seen: list[int | None] = []
    remove = invocation.add_quota_listener(lambda: seen.append(invocation.remaining))
    invocation.admit()
    invocation.admit()
    remove()
    remove()  # idempotent
    invocation.admit()
    assert seen == [4, 3]


def test_invocations_share_nothing() -> None:
    first, second = Invocation(), Invocation()
    assert first.sources is not second.sources
    assert first.cancelled is not second.cancelled
    assert first.state is not second.state
    assert first.id != second.id
    source = first.sources.add_text("9\n7.5\n", "runtimes.txt")
    with pytest.raises(SourceNotFound):
        second.sources.get(source.id)
    first.admit()
    first.cancel()
    assert second.remaining == second.max_calls
    assert not second.cancelled.is_set()


def test_a_given_source_registry_is_used_as_is() -> None:
    registry = SourceRegistry()
    assert Invocation(sources=registry).sources is registry


def test_report_feeds_the_sink_and_survives_a_broken_one(caplog: pytest.LogCaptureFixture) -> None:
    events: list[ProgressEvent] = []
    event = ProgressEvent(tool="t", phase="requested", call=0, elapsed_ms=0.0)
    Invocation(progress=events.append).report(event)
    assert events == [event]

    def broken(_: ProgressEvent) -> None:
        raise RuntimeError("display bug")

    Invocation(progress=broken).report(event)  # must not raise
    assert "progress sink" in caplog.text
    Invocation().report(event)  # no sink: nothing happens


async def test_aclose_cancels_and_runs_cleanups_last_first_even_if_one_fails() -> None:
    order: list[str] = []

    async def first() -> None:
        order.append("first")

    async def failing() -> None:
        order.append("failing")
        raise RuntimeError("cleanup bug")

    async def last() -> None:
        order.append("last")

    async with Invocation() as invocation:
        for cleanup in (first, failing, last):
            invocation.on_close(cleanup)
    assert order == ["last", "failing", "first"]
    assert invocation.cancelled.is_set()
    assert invocation.closed
    await invocation.aclose()  # idempotent
    assert order == ["last", "failing", "first"]


def test_repr_shows_the_budget_not_the_sources() -> None:
    invocation = Invocation(max_calls=2)
    invocation.admit()
    assert repr(invocation).endswith("calls 1/2>")
