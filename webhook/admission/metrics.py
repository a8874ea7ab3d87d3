"""The webhook's Prometheus metrics.

Two families. Ours (``colocation_webhook_*``): reviews by endpoint, operation and outcome, the time to answer one,
patch operations by the rule that wrote them, denials and rule failures by rule, connections dropped for reading
too slowly, the cache's sync state, the certificate, and ``build_info``. And the ones operators already chart for
webhooks built on controller-runtime, with its names, labels and buckets (``webhook`` is the path,
``code`` the HTTP status): ``controller_runtime_webhook_requests_total``,
``controller_runtime_webhook_latency_seconds`` and ``controller_runtime_webhook_requests_in_flight``, measured at
the HTTP edge (the dispatcher), so a review refused before the service (429, 408, 413) counts there too. The
process and Python collectors (``process_*``, ``python_*``) are in the same registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from webhook import __version__
from webhook.admission.review import REVIEW_PATHS
from webhook.cluster.state import ClusterState

# Buckets below 5 ms: the apiserver's own smallest bucket is 5 ms and we answer well under it.
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# client_golang's DefBuckets, which controller-runtime's latency histogram uses: the same `le` values as the
# dashboards operators already have (prometheus_client's own defaults differ).
GO_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self, state: ClusterState) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("colocation_webhook_requests", "Admission reviews by endpoint, operation and "
                                "outcome (allowed, patched, denied, bad_request, error, not_ready: before every "
                                "kind is listed)",
                                ["endpoint", "operation", "outcome"], registry=r)
        self.latency = Histogram("colocation_webhook_request_duration_seconds", "Time to answer one admission review",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.patches = Counter("colocation_webhook_patch_operations", "JSON Patch operations sent, by the rule "
                               "that wrote them", ["rule"], registry=r)
        self.denials = Counter("colocation_webhook_denials", "Denied admission reviews by rule", ["rule"], registry=r)
        self.rule_errors = Counter("colocation_webhook_rule_errors", "Rules that raised instead of answering (the "
                                   "review is answered by --on-rule-error)", ["rule"], registry=r)
        self.read_timeouts = Counter("colocation_webhook_read_timeouts", "Connections closed because the client "
                                     "sent its request headers or body too slowly", ["phase"], registry=r)
        self.build_info = Gauge("colocation_webhook_build_info", "Always 1; the labels say what is running",
                                ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        self.draining = Gauge("colocation_webhook_draining", "1 from SIGTERM until exit: unready, still answering "
                              "reviews for the drain delay", registry=r)
        # controller-runtime's webhook metrics (sigs.k8s.io/controller-runtime/pkg/webhook/internal/metrics).
        self.cr_requests = Counter("controller_runtime_webhook_requests", "Total number of admission requests by "
                                   "HTTP status code.", ["webhook", "code"], registry=r)
        self.cr_latency = Histogram("controller_runtime_webhook_latency_seconds", "Histogram of the latency of "
                                    "processing admission requests", ["webhook"], buckets=GO_DEFAULT_BUCKETS,
                                    registry=r)
        self.cr_in_flight = Gauge("controller_runtime_webhook_requests_in_flight", "Current number of admission "
                                  "requests being served.", ["webhook"], registry=r)
        for path in REVIEW_PATHS:  # as controller-runtime does: the likely codes show from the start
            self.cr_requests.labels(path, "200")
            self.cr_requests.labels(path, "500")
            self.cr_in_flight.labels(path)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(_StateCollector(state))
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

    def patched(self, rule: str, ops: int) -> None:
        self._child(self.patches, rule).inc(ops)

    def denied(self, rule: str) -> None:
        self._child(self.denials, rule).inc()

    def rule_failed(self, rule: str) -> None:
        self._child(self.rule_errors, rule).inc()

    def read_timeout(self, phase: str) -> None:
        self._child(self.read_timeouts, phase).inc()

    # -- the HTTP edge, controller-runtime's names --------------------------------------------------
    def in_flight(self, path: str) -> Any:
        """The in-flight gauge of ``path``: ``inc()`` when a review request starts, ``dec()`` when it ends."""
        return self._child(self.cr_in_flight, path)

    def http_answered(self, path: str, code: int, seconds: float) -> None:
        self._child(self.cr_requests, path, str(code)).inc()
        self._child(self.cr_latency, path).observe(seconds)


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
