"""The webhook's Prometheus metrics: requests, latency, patches, denials, and the cache's sync state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from webhook.cluster.state import ClusterState

# Buckets below 5 ms: the apiserver's own smallest bucket is 5 ms and we answer well under it.
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self, state: ClusterState) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("colocation_webhook_requests", "Admission requests by endpoint, operation and outcome",
                                ["endpoint", "operation", "outcome"], registry=self.registry)
        self.latency = Histogram("colocation_webhook_request_duration_seconds", "Time to answer one admission review",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.patches = Counter("colocation_webhook_patch_operations", "JSON Patch operations sent",
                               ["rule"], registry=self.registry)
        self.denials = Counter("colocation_webhook_denials", "Denied admission reviews by rule",
                               ["rule"], registry=self.registry)
        self.registry.register(_StateCollector(state))
        # The labelled children, kept per label values: ``labels()`` validates and locks on every call,
        # about as costly as a rule, and the label values repeat (a handful of each).
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:  # created on first use, as labels() does: a series shows once it happened
            child = self._children[key] = metric.labels(*values)
        return child

    def request(self, endpoint: str, operation: str, outcome: str) -> None:
        self._child(self.requests, endpoint, operation, outcome).inc()

    def observe(self, endpoint: str, seconds: float) -> None:
        self._child(self.latency, endpoint).observe(seconds)

    def patched(self, endpoint: str, ops: int) -> None:
        self._child(self.patches, endpoint).inc(ops)

    def denied(self, rule: str) -> None:
        self._child(self.denials, rule).inc()


class _StateCollector:
    """Cache sync state and object counts, read at scrape time."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        synced = GaugeMetricFamily("colocation_webhook_cache_synced", "1 when the kind completed its first sync",
                                   labels=["kind"])
        objects = GaugeMetricFamily("colocation_webhook_cache_objects", "Objects held in the cache",
                                    labels=["kind"])
        done = self.state.synced_kinds()
        for kind, n in self.state.counts().items():
            synced.add_metric([kind], 1.0 if kind in done else 0.0)
            objects.add_metric([kind], float(n))
        yield synced
        yield objects
