"""Uid leases: two zygotes on one host never hand out the same uid, whatever their config."""

from __future__ import annotations

import os

import anyio
import pytest

from corral._limits import Limits
from corral._uids import UidRange
from corral.engine import Engine
from corral.errors import IsolationError
from corral.sandbox.host._uid_lease import UID_LEASE, lease_uids

pytestmark = [pytest.mark.anyio]

# Far from the default range and from the other tests' ranges: nothing else leases these.
FIRST = 3_700_000
UID_OF_RUN = "print(open('/proc/self/uid_map').read().split()[1])"


def test_two_leases_of_one_range_are_disjoint_and_a_closed_one_comes_back() -> None:
    wide = UidRange(FIRST, 3 * UID_LEASE)
    first = lease_uids(wide)
    try:
        second = lease_uids(wide)
        try:
            assert first.uids == UidRange(FIRST, UID_LEASE)
            assert second.uids == UidRange(FIRST + UID_LEASE, UID_LEASE)
        finally:
            os.close(second.fd)
    finally:
        os.close(first.fd)
    again = lease_uids(wide)
    try:
        assert again.uids == first.uids  # the kernel dropped the lock with the descriptor
    finally:
        os.close(again.fd)


def test_a_small_range_is_one_lease_and_a_second_taker_is_told_why() -> None:
    small = UidRange(FIRST + 100_000, 8)
    held = lease_uids(small)
    try:
        assert held.uids == small
        with pytest.raises(IsolationError, match="uid_range of its own"):
            lease_uids(small)
    finally:
        os.close(held.fd)


def _engine(uid_range: tuple[int, int]) -> Engine:
    return Engine(capacity=1, pool_size=1, limits=Limits(timeout=20), uid_range=uid_range)


async def _uids_of_runs(engine: Engine, count: int) -> set[int]:
    seen: set[int] = set()
    for _ in range(count):
        result = await engine.run(UID_OF_RUN, limits=Limits(timeout=20))
        assert result.outcome == "ok", (result.message, result.stderr)
        seen.add(int(result.stdout))
    return seen


@pytest.mark.isolation
async def test_two_engines_with_the_same_uid_range_share_no_uid() -> None:
    shared = (FIRST + 200_000, 4 * UID_LEASE)  # two leases for each engine's two zygotes
    async with _engine(shared) as one, _engine(shared) as two:
        seen_one, seen_two = await _uids_of_runs(one, 4), await _uids_of_runs(two, 4)
    assert seen_one
    assert seen_two
    assert not seen_one & seen_two
    assert all(shared[0] <= uid < shared[0] + shared[1] for uid in seen_one | seen_two)


@pytest.mark.isolation
async def test_a_lease_ends_with_its_zygote() -> None:
    shared = (FIRST + 300_000, 4 * UID_LEASE)
    async with _engine(shared) as first:
        before = await _uids_of_runs(first, 2)
    with anyio.fail_after(30):
        async with _engine(shared) as later:
            after = await _uids_of_runs(later, 2)
    # The first engine's zygotes are gone, so the later one leases the same blocks again.
    assert before | after <= set(range(shared[0], shared[0] + UID_LEASE)) | set(
        range(shared[0] + 2 * UID_LEASE, shared[0] + 3 * UID_LEASE)
    )
