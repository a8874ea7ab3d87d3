"""The webhook's Prometheus metrics.

Two families. Ours (``colocation_webhook_*``): reviews by endpoint, operation and outcome, the time to answer one,
patch operations by the rule that wrote them, denials and rule failures by rule, connections dropped for reading
too slowly, the cache's sync state and age, the certificate, and ``build_info``. And the ones operators already
chart for webhooks built on controller-runtime, with its names, labels and buckets (``webhook`` is the path,
``code`` the HTTP status): ``controller_runtime_webhook_requests_total``,
``controller_runtime_webhook_latency_seconds`` and ``controller_runtime_webhook_requests_in_flight``, measured at
the HTTP edge (the review gate), so a review refused before the service (429, 403, 413) counts there too. The
process and Python collectors (``process_*``, ``python_*``) are in the same registry.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from webhook import __version__
from webhook.admission.chain import RuleTimes
from webhook.admission.review import REVIEW_PATHS
from webhook.cluster.cache_metrics import cache_families
from webhook.cluster.state import ClusterState

# Buckets below 5 ms: the apiserver's own smallest bucket is 5 ms and we answer well under it.
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# client_golang's DefBuckets, which controller-runtime's latency histogram uses: the same `le` values as the
# dashboards operators already have (prometheus_client's own defaults differ).
GO_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_go_float = cast(Callable[[float], str], floatToGoString)  # untyped in prometheus_client


class ReviewFamily:
    """A labelled counter, gauge or histogram of the review path, kept as plain numbers and exported at scrape
    time (``collect``, as a prometheus_client custom collector), in the very form prometheus_client writes its own
    (``_total`` and ``_created`` for a counter; ``_bucket`` with ``le``, ``_count``, ``_sum`` and ``_created`` for
    a histogram).

    Hand-written on purpose: a prometheus_client child costs a method, a check and a lock per update, and a review
    makes nine (docs/benchmarks.md, "The review path trimmed"). Here an update is one dict write. Every update is
    made on the event loop's thread (a review answered in a worker is counted when its evaluation comes back,
    ``ReviewService.record``); a scrape copies each dict in one C call, so it never sees one half-written.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], kind: str = "counter",
                 buckets: tuple[float, ...] = ()) -> None:
        self.name, self.documentation, self.labelnames, self.kind = name, documentation, labelnames, kind
        self.bounds = (*buckets, math.inf) if kind == "histogram" else ()
        self.le = tuple(_go_float(b) for b in self.bounds)       # the bounds as prometheus_client writes them
        self.values: dict[tuple[str, ...], float] = {}            # counter, gauge: the value; histogram: its sum
        self.counts: dict[tuple[str, ...], list[int]] = {}        # histogram: observations per bucket (not summed)
        self.created: dict[tuple[str, ...], float] = {}

    def series(self, labels: tuple[str, ...]) -> None:
        """Show a series at 0 before its first update (as controller-runtime shows its likely codes)."""
        if labels not in self.created:
            self.created[labels] = time.time()
            self.values[labels] = 0.0
            if self.kind == "histogram":
                self.counts[labels] = [0] * len(self.bounds)

    def add(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        """A counter's or a gauge's ``inc(amount)`` (a gauge's ``dec`` is a negative amount)."""
        value = self.values.get(labels)
        if value is None:
            self.series(labels)
            value = 0.0
        self.values[labels] = value + amount

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        counts = self.counts.get(labels)
        if counts is None:
            self.series(labels)
            counts = self.counts[labels]
        counts[bisect_left(self.bounds, seconds)] += 1  # the first bucket whose bound is >= seconds: its "le"
        self.values[labels] += seconds

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> list[Metric]:
        family = Metric(self.name, self.documentation, self.kind)
        created, values, counts = dict(self.created), dict(self.values), {k: list(v) for k, v in self.counts.items()}
        for labels, value in values.items():
            named = dict(zip(self.labelnames, labels, strict=True))
            if self.kind == "gauge":
                family.add_sample(self.name, named, value)
                continue
            if self.kind == "histogram":
                total = 0
                for le, n in zip(self.le, counts[labels], strict=True):
                    total += n
                    family.add_sample(self.name + "_bucket", {**named, "le": le}, total)
                family.add_sample(self.name + "_count", named, total)
                family.add_sample(self.name + "_sum", named, value)
            else:
                family.add_sample(self.name + "_total", named, value)
            family.add_sample(self.name + "_created", named, created[labels])
        return [family]


class Metrics:
    def __init__(self, state: ClusterState) -> None:
        self.registry = r = CollectorRegistry()
        # The review path's families: updated on every review, so plain numbers (ReviewFamily).
        self.requests = ReviewFamily("colocation_webhook_requests", "Admission reviews by endpoint, operation and "
                                     "outcome (allowed, patched, denied, bad_request, error, not_ready: before "
                                     "every kind is listed)", ("endpoint", "operation", "outcome"))
        self.latency = ReviewFamily("colocation_webhook_request_duration_seconds", "Time to answer one admission "
                                    "review", ("endpoint",), "histogram", LATENCY_BUCKETS)
        self.patches = ReviewFamily("colocation_webhook_patch_operations", "JSON Patch operations sent, by the rule "
                                    "that wrote them", ("rule",))
        self.denials = ReviewFamily("colocation_webhook_denials", "Denied admission reviews by rule", ("rule",))
        self.rule_errors = ReviewFamily("colocation_webhook_rule_errors", "Rules that raised instead of answering "
                                        "(the review is answered by --on-rule-error)", ("rule",))
        # controller-runtime's webhook metrics (sigs.k8s.io/controller-runtime/pkg/webhook/internal/metrics).
        self.cr_requests = ReviewFamily("controller_runtime_webhook_requests", "Total number of admission requests "
                                        "by HTTP status code.", ("webhook", "code"))
        self.cr_latency = ReviewFamily("controller_runtime_webhook_latency_seconds", "Histogram of the latency of "
                                       "processing admission requests", ("webhook",), "histogram",
                                       GO_DEFAULT_BUCKETS)
        self.cr_in_flight = ReviewFamily("controller_runtime_webhook_requests_in_flight", "Current number of "
                                         "admission requests being served.", ("webhook",), "gauge")
        for family in (self.requests, self.latency, self.patches, self.denials, self.rule_errors, self.cr_requests,
                       self.cr_latency, self.cr_in_flight):
            r.register(family)
        for path in REVIEW_PATHS:  # as controller-runtime does: the likely codes show from the start
            self.cr_requests.series((path, "200"))
            self.cr_requests.series((path, "500"))
            self.cr_in_flight.series((path,))
        self.read_timeouts = Counter("colocation_webhook_read_timeouts", "Connections closed because the client "
                                     "sent its request headers or body too slowly", ["phase"], registry=r)
        self.build_info = Gauge("colocation_webhook_build_info", "Always 1; the labels say what is running",
                                ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        self.draining = Gauge("colocation_webhook_draining", "1 from SIGTERM until exit: unready, still answering "
                              "reviews for the drain delay", registry=r)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(_StateCollector(state))
        self.rule_times = RuleTimes()  # the chain adds to it (ReviewService passes it), read at scrape time
        self.rule_durations = RuleDurations(self.rule_times)
        r.register(self.rule_durations)

    def request(self, endpoint: str, operation: str, outcome: str) -> None:
        self.requests.add((endpoint, operation, outcome))

    def observe(self, endpoint: str, seconds: float) -> None:
        self.latency.observe((endpoint,), seconds)

    def patched(self, rule: str, ops: int) -> None:
        self.patches.add((rule,), ops)

    def denied(self, rule: str) -> None:
        self.denials.add((rule,))

    def rule_failed(self, rule: str) -> None:
        self.rule_errors.add((rule,))

    def read_timeout(self, phase: str) -> None:
        self.read_timeouts.labels(phase).inc()

    # -- the HTTP edge, controller-runtime's names --------------------------------------------------
    def entered(self, path: str) -> None:
        """A review request on ``path`` started (the in-flight gauge)."""
        self.cr_in_flight.add((path,))

    def left(self, path: str) -> None:
        """A review request on ``path`` ended, answered or not."""
        self.cr_in_flight.add((path,), -1.0)

    def http_answered(self, path: str, code: int, seconds: float) -> None:
        self.cr_requests.add((path, str(code)))
        self.cr_latency.observe((path,), seconds)


class _StateCollector:
    """Cache sync state, object counts and freshness (webhook/cluster/cache_metrics.py), read at scrape time."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        synced = GaugeMetricFamily("colocation_webhook_cache_synced", "1 when the kind completed its first sync",
                                   labels=["kind"])
        objects = GaugeMetricFamily("colocation_webhook_cache_objects", "Objects held in the cache",
                                    labels=["kind"])
        invalid = GaugeMetricFamily("colocation_webhook_cache_invalid_objects",
                                    "Objects of the cluster left out of the cache (a profile: kept, never applied) "
                                    "because the apiserver's checks or its schema refuse them", labels=["kind"])
        done = self.state.synced_kinds()
        refused = self.state.invalid_counts()
        for kind, n in self.state.counts().items():
            synced.add_metric([kind], 1.0 if kind in done else 0.0)
            objects.add_metric([kind], float(n))
            invalid.add_metric([kind], float(refused.get(kind, 0)))
        yield synced
        yield objects
        yield invalid
        yield GaugeMetricFamily("colocation_webhook_cluster_state_reload_failing",
                                "1 while the last reload of --cluster-state failed: the last good state is served",
                                value=1.0 if self.state.reload_error is not None else 0.0)
        yield CounterMetricFamily("colocation_webhook_cluster_state_reload_failures",
                                  "Reloads of --cluster-state that failed (each kept the last good state)",
                                  value=float(self.state.failed_reloads))
        yield from cache_families(self.state, "colocation_webhook")


class RuleDurations:
    """``colocation_webhook_rule_duration_seconds``: the time each rule takes, a summary (``_count``, ``_sum``) by
    ``type`` (admit, validate), ``operation`` and ``rule`` - what the apiserver's
    ``apiserver_admission_controller_admission_duration_seconds`` is for its admission plugins. The chain adds to
    plain integers (``chain.RuleTimes``, one tally per thread); they are summed here at scrape time."""

    name = "colocation_webhook_rule_duration_seconds"
    labelnames = ("type", "operation", "rule")

    def __init__(self, times: RuleTimes) -> None:
        self.times = times

    def describe(self) -> list[Metric]:
        return [SummaryMetricFamily(self.name, "", labels=self.labelnames)]

    def collect(self) -> list[Metric]:
        family = SummaryMetricFamily(self.name, "Time spent in each admission rule, per run (a rerun pass runs "
                                     "a rule again)", labels=self.labelnames)
        for (kind, operation, rule), (count, ns) in sorted(self.times.totals().items()):
            family.add_metric([kind, operation, rule], count, ns / 1e9)
        return [family]
