"""Prometheus metrics: engine gauges read from ``engine.statistics()`` at scrape time.

Each app has its own ``CollectorRegistry``, so two apps in one process (tests, replicas in one
interpreter) never share or clash. Only the latency histogram is observed here; everything
else is the engine's own counting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds; a warm one-shot run takes milliseconds, a DIAL execution may take up to 60 s.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class _EngineCollector(Collector):
    def __init__(self, statistics: Callable[[], Any]) -> None:
        self._statistics = statistics

    def collect(self) -> Iterator[Metric]:
        stats = self._statistics()
        runs = CounterMetricFamily("corral_runs", "Finished runs by outcome", labels=["outcome"])
        for outcome, count in sorted(stats.runs_by_outcome.items()):
            runs.add_metric([outcome], count)
        yield runs
        gauges = {
            "corral_queue_length": ("Runs waiting for a worker", stats.queued),
            "corral_busy_workers": ("Workers running code now", stats.running),
            "corral_capacity": ("Workers that may run at once", stats.capacity),
            "corral_session_runs": (
                "Runs going in sessions with their own cgroup (they take no slot)",
                stats.scheduler.session_runs,
            ),
            "corral_sessions": ("Open sessions", stats.sessions),
            "corral_pool_ready": ("Pre-isolated workers waiting", stats.pool_ready),
            "corral_case_servers": (
                "Case servers kept for programs called repeatedly",
                stats.case_servers,
            ),
        }
        for name, (text, value) in gauges.items():
            yield GaugeMetricFamily(name, text, value=value)
        cpu = CounterMetricFamily(
            "corral_tenant_cpu_seconds",
            "CPU used by a tenant's sandboxes (runs, cases, sessions and what they left running)",
            labels=["tenant"],
        )
        for tenant, seconds in sorted(stats.cpu_seconds_by_tenant.items()):
            cpu.add_metric([tenant], seconds)
        yield cpu
        background = GaugeMetricFamily(
            "corral_background_processes",
            "Processes running in a tenant's sessions beside their interpreters",
            labels=["tenant"],
        )
        for tenant, count in sorted(stats.background_by_tenant.items()):
            background.add_metric([tenant], count)
        yield background
        egress = stats.egress
        if egress is not None:
            verdicts = CounterMetricFamily(
                "corral_egress_connections",
                "Connections sandboxes made out, by the egress side's verdict",
                labels=["verdict"],
            )
            verdicts.add_metric(["allowed"], egress.allowed)
            verdicts.add_metric(["denied"], egress.denied)
            yield verdicts
            yield CounterMetricFamily(
                "corral_egress_bytes",
                "Bytes sandboxes moved through the network",
                value=egress.bytes,
            )
            by_tenant = CounterMetricFamily(
                "corral_egress_tenant_bytes",
                "Bytes a tenant's sandboxes moved through the network",
                labels=["tenant"],
            )
            for tenant, moved in sorted(egress.bytes_by_tenant.items()):
                by_tenant.add_metric([tenant], moved)
            yield by_tenant


class Metrics:
    """The app's registry plus the execution-latency histogram."""

    def __init__(self, statistics: Callable[[], Any]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(statistics))
        self._latency = Histogram(
            "corral_execution_seconds",
            "Wall time of executions served over HTTP, queueing included",
            ["endpoint", "outcome"],
            buckets=_BUCKETS,
            registry=self.registry,
        )

    def observe(self, endpoint: str, outcome: str, elapsed_ms: float) -> None:
        """Record one execution's latency."""
        self._latency.labels(endpoint, outcome).observe(elapsed_ms / 1000.0)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
