"""Prometheus metrics for one daemon (its own registry, so several can share a process in tests).

Every per-evaluation series carries `slot` and `gpu_uuid` labels (`gpu_uuid="cpu"` for a CPU
slot; `slot="cache"` for a result answered from the result cache), so one sick GPU among
eight shows up as its own series (`slot="none"`: ended in the queue). Verdict and busy series exist from the start (at 0), so a
rate() over them is defined before the first event. Slot, queue and health gauges are read at
scrape time from the service (`watch_slots`). No `_created` series are exported.

Series (docs/operations.md has the table with their meaning and the alert rules):
    evalfarm_verdicts_total{verdict,slot,gpu_uuid}
    evalfarm_phase_seconds_{bucket,sum,count}{phase,slot,gpu_uuid}
    evalfarm_slot_busy_seconds_total{slot,gpu_uuid}
    evalfarm_slot_busy{slot,gpu_uuid,gpu}             1 while it evaluates
    evalfarm_slot_in_service{slot,gpu_uuid,gpu}       0 after repeated faults, until a probe passes
    evalfarm_slot_consecutive_faults{slot,gpu_uuid,gpu}
    evalfarm_slot_probes_total{slot,gpu_uuid,outcome}
    evalfarm_slots{state="total|busy|free|out_of_service"}
    evalfarm_queue_depth{queue="ordinary|reverification"}
    evalfarm_queue_limit, evalfarm_draining
    evalfarm_requests_total{rpc}, evalfarm_requests_rejected_total{reason}
    evalfarm_result_cache_total{outcome}, evalfarm_compile_*
    evalfarm_build_info{version,python,grpcio,torch,mode}
    process_*, python_gc_*, python_info
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from evalfarm.verdict import Verdict

PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
CACHE_SLOT = "cache"  # answered from the result cache
NO_SLOT = "none"  # ended before it got a slot (deadline or drain while queued)

# `_created` series double the series count and carry nothing a dashboard uses.
prometheus_client.disable_created_metrics()


@dataclasses.dataclass(frozen=True)
class SlotLabels:
    slot: str
    gpu_uuid: str
    gpu: str


@dataclasses.dataclass(frozen=True)
class SlotSample:
    """One slot's state at scrape time."""

    labels: SlotLabels
    busy: bool
    in_service: bool
    consecutive_faults: int


@dataclasses.dataclass(frozen=True)
class FarmSample:
    slots: Sequence[SlotSample]
    ordinary_depth: int
    priority_depth: int
    queue_limit: int


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


class _WarmJudgesCollector(Collector):
    """Judges started ahead of need (evalfarm.judge.standby), read at scrape time."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        try:
            stats = self._stats() or {}
        except Exception:  # noqa: BLE001 - a scrape must not fail because the daemon is closing
            stats = {}
        c = CounterMetricFamily("evalfarm_judges_taken", "Judge processes handed to evaluations, by whether "
                                "one started ahead was ready (warm) or one had to start then (cold)",
                                labels=["start"])  # warm, cold, or window: a judge kept for its task
        c.add_metric(["warm"], float(stats.get("warm", 0)))
        c.add_metric(["cold"], float(stats.get("cold", 0)))
        c.add_metric(["window"], float(stats.get("window", 0)))
        yield c
        g = GaugeMetricFamily("evalfarm_judges_standing_by", "Judge processes started ahead, waiting")
        g.add_metric([], float(stats.get("standing_by", 0)))
        yield g
        p = GaugeMetricFamily("evalfarm_judges_parked", "Judge processes keeping a task's set-up for its next "
                              "candidate (task windows)")
        p.add_metric([], float(stats.get("parked", 0)))
        yield p


class _SlotCollector(Collector):
    """Slot and queue gauges read from the service at scrape time (never stale)."""

    def __init__(self, sample: Callable[[], FarmSample]) -> None:
        self._sample = sample

    def collect(self) -> Iterator[Any]:
        s = self._sample()
        names = ["slot", "gpu_uuid", "gpu"]
        busy = GaugeMetricFamily("evalfarm_slot_busy", "1 while the slot runs an evaluation", labels=names)
        up = GaugeMetricFamily("evalfarm_slot_in_service", "0 when the slot was taken out of service",
                               labels=names)
        faults = GaugeMetricFamily("evalfarm_slot_consecutive_faults",
                                   "CUDA_FAULT / TIMEOUT / INFRA_ERROR results in a row", labels=names)
        for slot in s.slots:
            lv = [slot.labels.slot, slot.labels.gpu_uuid, slot.labels.gpu]
            busy.add_metric(lv, float(slot.busy))
            up.add_metric(lv, float(slot.in_service))
            faults.add_metric(lv, float(slot.consecutive_faults))
        yield from (busy, up, faults)
        total = len(s.slots)
        n_busy = sum(1 for x in s.slots if x.busy)
        n_out = sum(1 for x in s.slots if not x.in_service)
        n_free = sum(1 for x in s.slots if x.in_service and not x.busy)
        slots = GaugeMetricFamily("evalfarm_slots", "Slots by state", labels=["state"])
        for state, value in (("total", total), ("busy", n_busy), ("free", n_free), ("out_of_service", n_out)):
            slots.add_metric([state], float(value))
        yield slots
        depth = GaugeMetricFamily("evalfarm_queue_depth", "Requests waiting for a slot", labels=["queue"])
        depth.add_metric(["ordinary"], float(s.ordinary_depth))
        depth.add_metric(["reverification"], float(s.priority_depth))
        yield depth
        limit = GaugeMetricFamily("evalfarm_queue_limit", "Ordinary requests that may wait")
        limit.add_metric([], float(s.queue_limit))
        yield limit


def _dist_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return ""


class Metrics:
    def __init__(self, slots: Sequence[SlotLabels] = (SlotLabels("0", "cpu", "cpu"),), *,
                 version: str = "", mode: str = "cpu") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.slot_labels = list(slots)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        slot_names = ["slot", "gpu_uuid"]
        self.slot_busy_seconds = Counter(
            "evalfarm_slot_busy_seconds", "Seconds each slot spent evaluating", slot_names, registry=r
        )
        self.verdicts = Counter(
            "evalfarm_verdicts", "Results by verdict and slot", ["verdict", *slot_names], registry=r
        )
        self.requests = Counter("evalfarm_requests", "Scoring requests received", ["rpc"], registry=r)
        self.rejected = Counter(
            "evalfarm_requests_rejected", "Requests rejected, by reason", ["reason"], registry=r
        )
        self.result_cache = Counter(
            "evalfarm_result_cache", "Result cache lookups", ["outcome"], registry=r
        )
        self.phase_seconds = Histogram(
            "evalfarm_phase_seconds", "Per-phase latency", ["phase", *slot_names], buckets=PHASE_BUCKETS,
            registry=r,
        )
        self.probes = Counter(
            "evalfarm_slot_probes", "Known-good probes of slots out of service", [*slot_names, "outcome"],
            registry=r,
        )
        self.draining = Gauge("evalfarm_draining", "1 while the daemon drains", registry=r)
        self.build_info = Info("evalfarm_build", "Versions this daemon runs", registry=r)
        self.build_info.info({
            "version": version or _dist_version("cuda-crl") or "unknown",
            "python": platform.python_version(),
            "grpcio": _dist_version("grpcio"),
            "torch": _dist_version("torch"),
            "mode": mode,
        })
        for labels in self.slot_labels:  # series exist (at 0) before the first event
            self.slot_busy_seconds.labels(labels.slot, labels.gpu_uuid)
            for verdict in Verdict:
                self.verdicts.labels(verdict.value, labels.slot, labels.gpu_uuid)
        for verdict in Verdict:
            self.verdicts.labels(verdict.value, CACHE_SLOT, "")
        self.verdicts.labels(Verdict.INFRA_ERROR.value, NO_SLOT, "")
        for reason in ("auth", "invalid", "queue_full", "draining", "no_slots"):
            self.rejected.labels(reason)

    def labels_for(self, slot: int | None, cached: bool = False) -> tuple[str, str]:
        """(slot, gpu_uuid) label values; pseudo-slots for a cached or never-started result."""
        if slot is None:
            return (CACHE_SLOT if cached else NO_SLOT), ""
        labels = self.slot_labels[slot]
        return labels.slot, labels.gpu_uuid

    def watch_build_pool(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(_BuildPoolCollector(stats))

    def watch_warm_judges(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(_WarmJudgesCollector(stats))

    def watch_slots(self, sample: Callable[[], FarmSample]) -> None:
        self.registry.register(_SlotCollector(sample))

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Expose /metrics over HTTP; returns (server, thread)."""
        return start_http_server(port, addr=addr, registry=self.registry)
