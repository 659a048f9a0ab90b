"""A batch over a Ray cluster: one corral engine per node, items spread with back-pressure.

Each alive node gets a ``NodeEngine`` actor pinned to it (node affinity, not soft), whose
engine runs as many workers as the node has CPUs (or ``concurrency``). The driver keeps at most
``window_for(capacity)`` items in flight per actor, hands the next item to the least loaded
one, and yields records in input order. When an actor's node dies, the items it had not
finished go to the others, and their records say so under ``retries``.

The actors ask Ray for no CPUs: corral's engine bounds its own workers, and a reservation of a
whole node would never be granted on a cluster whose CPUs training already holds.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from corral.batch._items import BatchItem, Record, invalid_record, parse_item, record_for
from corral.batch._local import window_for
from corral.batch._node import NodeEngine
from corral.engine import ExecutionResult
from corral.errors import ConfigError

__all__ = ["run_on_ray"]

logger = logging.getLogger("corral.batch")

_STOP_TIMEOUT = 10.0  # seconds for an actor to close its engine before it is killed
_START_TIMEOUT = 300.0  # seconds for every node's engine to start (zygote, preload, probe)
_PENDING_PER_ROOM = 8  # finished records held behind a slow one, per in-flight slot


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--ray needs Ray: pip install 'corral[ray]'") from exc
    return ray


@dataclass(slots=True)
class _Slot:
    raw: Any
    item: BatchItem | str
    record: Record | None = None
    retries: list[dict[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Node:
    id: str
    actor: Any
    capacity: int
    in_flight: int = 0
    alive: bool = True

    @property
    def room(self) -> int:
        return window_for(self.capacity) - self.in_flight if self.alive else 0


class _Cluster:
    """The actors, what each is running, and re-dispatch when one dies."""

    def __init__(self, ray: Any, concurrency: int | None) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._ray = ray
        self._exceptions = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
        remote = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1024)(NodeEngine)
        self.nodes: list[_Node] = []
        for info in ray.nodes():
            if not info.get("Alive"):
                continue
            cpus = int(info.get("Resources", {}).get("CPU", 1)) or 1
            capacity = concurrency or cpus
            strategy = NodeAffinitySchedulingStrategy(node_id=info["NodeID"], soft=False)
            actor = remote.options(scheduling_strategy=strategy).remote(capacity)
            self.nodes.append(_Node(info["NodeID"], actor, capacity))
        if not self.nodes:
            raise ConfigError("the Ray cluster has no alive node")
        ray.get([n.actor.start.remote() for n in self.nodes], timeout=_START_TIMEOUT)
        self.running: dict[Any, tuple[_Slot, _Node]] = {}
        self.waiting: deque[_Slot] = deque()
        """Items (new or retried) waiting for a node with room."""

    @property
    def room(self) -> int:
        return sum(n.room for n in self.nodes)

    @property
    def alive(self) -> bool:
        return any(n.alive for n in self.nodes)

    def submit(self, slot: _Slot) -> None:
        """Send the slot's item to the least loaded node, or keep it until one has room."""
        self.waiting.append(slot)
        self.dispatch()

    def dispatch(self) -> None:
        while self.waiting:
            node = max(self.nodes, key=lambda n: n.room)
            if not self.alive:
                slot = self.waiting.popleft()
                assert isinstance(slot.item, BatchItem)
                result = ExecutionResult(
                    outcome="worker_error", message="every Ray node running corral has died"
                )
                slot.record = record_for(slot.item.id, result, "")
                continue
            if node.room <= 0:
                return
            slot = self.waiting.popleft()
            assert isinstance(slot.item, BatchItem)
            node.in_flight += 1
            self.running[node.actor.run.remote(slot.item.as_dict())] = (slot, node)

    def collect(self) -> None:
        """Wait for at least one run to finish and file every finished one."""
        done, _ = self._ray.wait(list(self.running), num_returns=1)
        more, _ = self._ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
        for ref in {*done, *more}:
            slot, node = self.running.pop(ref)
            node.in_flight -= 1
            try:
                slot.record = self._ray.get(ref)
            except self._exceptions as exc:
                self._lost(node, exc)
                slot.retries.append({"node": node.id, "error": type(exc).__name__})
                self.waiting.appendleft(slot)  # first in line: later items wait for it
        self.dispatch()

    def _lost(self, node: _Node, exc: BaseException) -> None:
        if node.alive:
            node.alive = False
            logger.warning("Ray node %s died (%s); its items go to the others", node.id, exc)

    def close(self) -> None:
        live = [n.actor for n in self.nodes if n.alive]
        try:
            self._ray.get([a.stop.remote() for a in live], timeout=_STOP_TIMEOUT)
        except Exception:  # noqa: BLE001 - closing: a dead or slow actor is killed below
            logger.warning("some corral actors did not stop in time")
        for node in self.nodes:
            self._ray.kill(node.actor)


def run_on_ray(
    entries: Iterable[Any], *, address: str, concurrency: int | None = None
) -> Iterator[Record]:
    """Spread the entries over the Ray cluster at ``address``; yield records in input order.

    Connects with ``ray.init(address=...)`` unless Ray is already initialised in this process
    (then it uses that cluster and leaves it connected).

    Raises:
        ConfigError: Ray is not installed, the cluster cannot be reached or has no alive
            node.
    """
    ray = _ray()
    connected_here = not ray.is_initialized()
    if connected_here:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except ConnectionError as exc:
            raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {exc}") from exc
    cluster: _Cluster | None = None
    try:
        cluster = _Cluster(ray, concurrency)
        yield from _pump(cluster, entries)
    finally:
        if cluster is not None:
            cluster.close()
        if connected_here:
            ray.shutdown()


def _pump(cluster: _Cluster, entries: Iterable[Any]) -> Iterator[Record]:
    pending: deque[_Slot] = deque()
    # Finished records wait here for a slow item before them; bounded so memory stays flat.
    most_pending = _PENDING_PER_ROOM * cluster.room
    source = iter(entries)
    exhausted = False
    while True:
        while (
            not exhausted
            and not cluster.waiting
            and cluster.room > 0
            and len(pending) < most_pending
        ):
            raw = next(source, _END)
            if raw is _END:
                exhausted = True
                break
            pending.append(_start(cluster, raw))
        while pending and pending[0].record is not None:
            yield _finished(pending.popleft())
        if not pending and exhausted:
            return
        if cluster.running:
            cluster.collect()
        elif not cluster.alive and not exhausted:
            # No node is left: what remains gets worker_error records, in order.
            pending.extend(_start(cluster, raw) for raw in source)
            exhausted = True


def _start(cluster: _Cluster, raw: Any) -> _Slot:
    slot = _Slot(raw, parse_item(raw))
    if isinstance(slot.item, str):
        slot.record = invalid_record(raw, slot.item)
    else:
        cluster.submit(slot)
    return slot


def _finished(slot: _Slot) -> Record:
    record = slot.record
    assert record is not None
    if slot.retries:
        record["retries"] = slot.retries
    return record


_END = object()
