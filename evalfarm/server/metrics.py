"""Prometheus metrics for one daemon (its own registry, so several can share a process in tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


class _BuildPoolCollector(Collector):
    """Compile-cache counters read from BuildPool.stats() at scrape time."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        try:
            stats = self._stats() or {}
        except Exception:  # noqa: BLE001 - a scrape must not fail because the pool is closing
            stats = {}
        for key in ("hits", "misses", "builds"):
            c = CounterMetricFamily(f"evalfarm_compile_cache_{key}", f"Compile pool {key}")
            c.add_metric([], float(stats.get(key, 0)))
            yield c
        g = GaugeMetricFamily("evalfarm_compile_in_flight", "Builds running in the compile pool")
        g.add_metric([], float(stats.get("in_flight", 0)))
        yield g


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge("evalfarm_queue_depth", "Requests waiting for a slot", registry=r)
        self.slots_busy = Gauge("evalfarm_slots_busy", "Slots running an evaluation", registry=r)
        self.slot_busy_seconds = Counter(
            "evalfarm_slot_busy_seconds", "Seconds each slot spent evaluating", ["slot"], registry=r
        )
        self.verdicts = Counter("evalfarm_verdicts", "Results by verdict", ["verdict"], registry=r)
        self.requests = Counter("evalfarm_requests", "Scoring requests received", ["rpc"], registry=r)
        self.rejected = Counter(
            "evalfarm_requests_rejected", "Requests rejected, by reason", ["reason"], registry=r
        )
        self.result_cache = Counter(
            "evalfarm_result_cache", "Result cache lookups", ["outcome"], registry=r
        )
        self.phase_seconds = Histogram(
            "evalfarm_phase_seconds", "Per-phase latency", ["phase"], buckets=PHASE_BUCKETS, registry=r
        )
        self.draining = Gauge("evalfarm_draining", "1 while the daemon drains", registry=r)

    def watch_build_pool(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(_BuildPoolCollector(stats))

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Expose /metrics over HTTP; returns (server, thread)."""
        return start_http_server(port, addr=addr, registry=self.registry)
