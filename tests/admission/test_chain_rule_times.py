"""colocation_webhook_rule_duration_seconds: each rule's runs and time, by webhook type and operation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.mutating import make_state, pod, priority_class, request
from webhook.admission import chain
from webhook.admission.response import Denial
from webhook.cluster.state import ClusterState
from webhook.server.metrics import Metrics

NAME = "colocation_webhook_rule_duration_seconds"


def _samples(metrics: Metrics) -> dict[tuple[str, str, str, str], float]:
    """(series, type, operation, rule) -> value, as scraped."""
    out = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            if s.name.startswith(NAME):
                out[(s.name, s.labels["type"], s.labels["operation"], s.labels["rule"])] = s.value
    return out


def test_each_rule_run_is_counted_and_timed_per_type_and_operation() -> None:
    metrics = Metrics(ClusterState())
    before = _samples(metrics)
    state = make_state(priority_class("koord-batch", 5000))
    p = pod(requests={"cpu": "1", "memory": "1Gi"}, priorityClassName="koord-batch", priority=5000,
            labels={"koordinator.sh/qosClass": "BE"})
    for _ in range(3):
        chain.mutate(request(p), state, chain.Settings())
    chain.validate(request(p, "UPDATE", old=p), state, chain.Settings())
    after = _samples(metrics)

    def grew(series: str, kind: str, op: str, rule: str) -> float:
        key = (NAME + series, kind, op, rule)
        return after[key] - before.get(key, 0.0)

    for rule in chain.MUTATING:
        assert grew("_count", "admit", "CREATE", rule.NAME) == 3, rule.NAME
        assert grew("_sum", "admit", "CREATE", rule.NAME) > 0
    ran = {rule for (series, kind, op, rule) in after if kind == "validate" and op == "UPDATE"}
    assert ran and ran <= {r.NAME for r in chain.VALIDATING}
    assert all(grew("_count", "validate", "UPDATE", r) >= 1 for r in ran)


@dataclass
class _Raises:
    NAME: str = "raises"

    def handles(self, request: Any) -> bool:
        return True

    def validate(self, ctx: Any) -> Denial | None:
        raise RuntimeError("boom")


def test_a_rule_that_raises_is_timed_too() -> None:
    metrics = Metrics(ClusterState())
    chain.validate(request(pod()), make_state(), chain.Settings(), rules=(_Raises(),))
    assert _samples(metrics)[(NAME + "_count", "validate", "CREATE", "raises")] >= 1
