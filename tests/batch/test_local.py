"""``run_batch`` on this machine: order, stdin, per-item timeouts, bad items, early stop (on the
sandbox's in-process twin), and cases forked from a kept case server (real workers)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from corral.batch import BatchItem, run_batch
from tests.engine.twinkit import SPIN


def test_records_come_in_input_order_with_the_full_result() -> None:
    items: list[Any] = [
        BatchItem(id=i, code="import sys\nprint(sys.stdin.read().upper())", stdin=f"x{i}")
        for i in range(40)
    ]
    items.insert(3, {"id": "slow", "code": SPIN, "timeout": 1})
    items.insert(10, {"id": "typo", "code": 42})
    items.insert(11, ["not", "an", "object"])
    records = list(run_batch(items, concurrency=2))
    assert [r["id"] for r in records][:12] == [0, 1, 2, "slow", 3, 4, 5, 6, 7, 8, "typo", None]
    by_id = {r["id"]: r for r in records}
    assert by_id["slow"]["outcome"] == "timeout"
    assert by_id["typo"]["outcome"] == "invalid_input"
    assert "code must be a string" in by_id["typo"]["message"]
    assert by_id[7]["stdout"] == "X7\n"
    assert {r["node"] for r in records} == {socket.gethostname()}
    assert {"status", "outcome", "stderr", "evidence", "elapsed_ms"} <= set(by_id[0])


@pytest.mark.usefixtures("real_workers")
def test_items_that_repeat_a_program_fork_from_a_kept_case_server() -> None:
    # A fresh worker is init of its own pid namespace; a case forked from a case server is not.
    code = "import os, sys\nprint(os.getpid() == 1, sys.stdin.read())"
    items = [{"id": i, "code": code, "stdin": str(i)} for i in range(20)]
    records = list(run_batch(items, concurrency=2))
    assert [r["stdout"].split()[1] for r in records] == [str(i) for i in range(20)]
    fresh = [r["id"] for r in records if r["stdout"].startswith("True")]
    assert fresh == [0]  # the program's first item; the rest are cases


def test_a_consumer_may_stop_early() -> None:
    items = ({"id": i, "code": f"print({i})"} for i in range(10_000))
    first = []
    for record in run_batch(items, concurrency=1):
        first.append(record["stdout"])
        if len(first) == 3:
            break
    assert first == ["0\n", "1\n", "2\n"]
