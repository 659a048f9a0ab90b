"""``run_batch(..., ray_address=...)`` on a real two-node Ray cluster on this machine.

Ray's own ``cluster_utils.Cluster`` starts a head and a second node, loopback only; the test
checks that both nodes run items, then kills the second node mid-batch and checks that its
unfinished items ran on the head instead and say so.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

# Ray picks the machine's address for every node unless told to stay on loopback; its
# processes read this when they start, so it is set before Ray is imported.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

from corral.batch import run_batch  # noqa: E402

pytestmark = [
    pytest.mark.isolation,
    pytest.mark.network,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("real_workers"),
]

_MIB = 1024 * 1024
ITEMS = 60
KILL_AFTER = 16  # records seen before the second node is removed


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    made = ray_cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": 100 * _MIB},
    )
    try:
        made.add_node(num_cpus=1, object_store_memory=100 * _MIB)
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()


def _items(count: int) -> list[dict[str, Any]]:
    # Long enough that the second node still has items in flight when it is killed.
    code = "import time\ntime.sleep(0.05)\nprint(int(input()) * 3)"
    return [{"id": i, "code": code, "stdin": f"{i}\n"} for i in range(count)]


def test_both_nodes_run_items_and_a_killed_node_is_recovered_from(cluster: Any) -> None:
    head = cluster.head_node.node_id
    (second,) = [n for n in cluster.list_all_nodes() if n is not cluster.head_node]
    records: list[dict[str, Any]] = []
    nodes_before_kill: Counter[str] = Counter()
    for record in run_batch(_items(ITEMS), ray_address=cluster.address):
        records.append(record)
        if len(records) == KILL_AFTER:
            nodes_before_kill = Counter(r["node"] for r in records)
            cluster.remove_node(second)
    assert set(nodes_before_kill) == {head, second.node_id}
    assert [r["id"] for r in records] == list(range(ITEMS))
    for record in records:
        assert (record["outcome"], record["stdout"]) == ("ok", f"{record['id'] * 3}\n"), record
    retried = [r for r in records if "retries" in r]
    assert retried
    for record in retried:
        assert record["node"] == head
        assert record["retries"][0]["node"] == second.node_id

    # The cluster that is left still serves a batch, and bad items are records, not aborts.
    more = list(run_batch([*_items(3), {"id": "bad"}], ray_address=cluster.address))
    assert [r["outcome"] for r in more] == ["ok", "ok", "ok", "invalid_input"]
    assert {r["node"] for r in more[:3]} == {head}
