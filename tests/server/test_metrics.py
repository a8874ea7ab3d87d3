"""The review path's metric families (``ReviewFamily``) are exported exactly as prometheus_client exports its own
metrics after the same updates: names, types, help, labels, bucket bounds and values. Only the ``_created``
timestamps differ (each side's own time of first use)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from webhook.cluster.state import ClusterState
from webhook.server.metrics import GO_DEFAULT_BUCKETS, LATENCY_BUCKETS, Metrics, ReviewFamily

CREATED = re.compile(r"^(\w+_created\{[^}]*\}) \S+$", re.MULTILINE)


def _text(*collectors: object) -> str:
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)  # type: ignore[arg-type]  # prometheus_client types it Collector; any with collect() works
    return CREATED.sub(r"\1 <time>", generate_latest(registry).decode())


LABELS = st.sampled_from([("a", "x"), ("b", "y"), ("c\"q", "z\\")])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(LABELS, st.integers(min_value=0, max_value=5)), max_size=12))
def test_a_counter_is_written_as_prometheus_client_writes_one(updates: list[tuple[tuple[str, str], int]]) -> None:
    ours = ReviewFamily("t_requests", "Requests.", ("endpoint", "code"))
    theirs = Counter("t_requests", "Requests.", ["endpoint", "code"], registry=None)
    for labels, amount in updates:
        ours.add(labels, amount)
        theirs.labels(*labels).inc(amount)
    assert _text(ours) == _text(theirs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(LABELS, st.sampled_from([0.0, 0.0002, 0.00021, 0.005, 0.3, 2.5, 7.0, 30.0])),
                max_size=12),
       st.sampled_from([LATENCY_BUCKETS, GO_DEFAULT_BUCKETS]))
def test_a_histogram_is_written_as_prometheus_client_writes_one(updates: list[tuple[tuple[str, str], float]],
                                                                 buckets: tuple[float, ...]) -> None:
    """Every bound and the values on a bound (``le`` is "at most"), above the last, and zero."""
    ours = ReviewFamily("t_seconds", "Time.", ("endpoint", "code"), "histogram", buckets)
    theirs = Histogram("t_seconds", "Time.", ["endpoint", "code"], buckets=buckets, registry=None)
    for labels, seconds in updates:
        ours.observe(labels, seconds)
        theirs.labels(*labels).observe(seconds)
    assert _text(ours) == _text(theirs)


def test_a_gauge_goes_up_and_down_and_a_series_shows_before_its_first_update() -> None:
    ours = ReviewFamily("t_in_flight", "In flight.", ("webhook",), "gauge")
    theirs = Gauge("t_in_flight", "In flight.", ["webhook"], registry=None)
    ours.series(("/validate",))
    theirs.labels("/validate")
    for amount in (1, 1, -1):
        ours.add(("/mutate",), amount)
        theirs.labels("/mutate").inc(amount)
    assert _text(ours) == _text(theirs)
    assert 't_in_flight{webhook="/mutate"} 1.0' in _text(ours)
    assert 't_in_flight{webhook="/validate"} 0.0' in _text(ours)


def test_the_webhook_counts_a_review_in_its_registry() -> None:
    """Through Metrics' own methods, scraped from its registry: the families are registered and counted."""
    metrics = Metrics(ClusterState())
    metrics.entered("/mutate")
    metrics.request("mutate", "CREATE", "patched")
    metrics.patched("batch-resources", 4)
    metrics.http_answered("/mutate", 200, 0.0003)
    metrics.http_answered("/mutate", 418, 0.0003)  # any status has its series
    text = generate_latest(metrics.registry).decode()
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/mutate"} 1.0' in text
    assert ('colocation_webhook_requests_total{endpoint="mutate",operation="CREATE",outcome="patched"} 1.0'
            in text)
    assert 'colocation_webhook_patch_operations_total{rule="batch-resources"} 4.0' in text
    assert 'controller_runtime_webhook_requests_total{code="200",webhook="/mutate"} 1.0' in text
    assert 'controller_runtime_webhook_requests_total{code="418",webhook="/mutate"} 1.0' in text
    assert 'controller_runtime_webhook_latency_seconds_bucket{le="0.005",webhook="/mutate"} 2.0' in text
    metrics.left("/mutate")
    assert ('controller_runtime_webhook_requests_in_flight{webhook="/mutate"} 0.0'
            in generate_latest(metrics.registry).decode())
