"""colocation_webhook_rule_duration_seconds: each rule's runs and time, by webhook type and operation, counted
exactly when several threads run rules at once (the event loop's and the large-review worker's)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.mutating import make_state, pod, priority_class, request
from webhook.admission import chain
from webhook.admission.response import Denial
from webhook.cluster.state import ClusterState
from webhook.server.metrics import Metrics
from webhook.server.service import ReviewService

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
        chain.mutate(request(p), state, chain.Settings(), rule_times=metrics.rule_times)
    chain.validate(request(p, "UPDATE", old=p), state, chain.Settings(), rule_times=metrics.rule_times)
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
class _Rule:
    """A validating rule that handles every request and allows it, or raises."""

    NAME: str
    raises: bool = False

    def handles(self, request: Any) -> bool:
        return True

    def validate(self, ctx: Any) -> Denial | None:
        if self.raises:
            raise RuntimeError("boom")
        return None


def test_a_rule_that_raises_is_timed_too() -> None:
    metrics = Metrics(ClusterState())
    chain.validate(request(pod()), make_state(), chain.Settings(), rules=(_Rule("raises", raises=True),), rule_times=metrics.rule_times)
    assert _samples(metrics)[(NAME + "_count", "validate", "CREATE", "raises")] == 1


def test_the_service_times_its_rules_in_its_own_metrics() -> None:
    """Each service counts in its own metrics object: nothing is shared between two (no process-global)."""
    state = make_state()
    counted, other = ReviewService(state, metrics=Metrics(state)), ReviewService(state, metrics=Metrics(state))
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": _request_dict()}).encode()
    for _ in range(2):
        assert counted.answer("mutate", body).status == 200
    runs = {rule: n for (series, kind, op, rule), n in _samples(counted.metrics).items()
            if series == NAME + "_count" and (kind, op) == ("admit", "CREATE")}
    assert runs == {rule.NAME: 2 for rule in chain.MUTATING}
    assert _samples(other.metrics) == {}


def _request_dict() -> dict[str, Any]:
    return {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
            "operation": "CREATE", "userInfo": {"username": "u"}, "object": pod(), "dryRun": False}


@contextmanager
def _switching_often() -> Iterator[None]:
    """Threads handed the GIL every microsecond, so that a switch falls between any read and write it can."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _burst(threads: int, work: Callable[[], None]) -> None:
    """``work`` in ``threads`` threads started together, handed the GIL often."""
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        work()

    pool = [threading.Thread(target=run) for _ in range(threads)]
    with _switching_often():
        for t in pool:
            t.start()
        for t in pool:
            t.join()


def _lost(threads: int, each: int, record: Callable[[], None], total: Callable[[], int]) -> int:
    """How many of ``threads`` x ``each`` recordings made at once the total misses."""

    def work() -> None:
        for _ in range(each):
            record()

    _burst(threads, work)
    return threads * each - total()


def test_runs_recorded_by_several_threads_at_once_are_all_counted() -> None:
    times, key = chain.RuleTimes(), ("admit", "CREATE", "priority")
    assert _lost(8, 20_000, lambda: times.record("admit", "CREATE", "priority", 3),
                 lambda: times.totals()[key][0]) == 0
    assert times.totals() == {key: (8 * 20_000, 3 * 8 * 20_000)}


def _plus_one(n: int) -> int:
    return n + 1


def test_the_burst_check_sees_lost_counts() -> None:
    """The check can fail: one count shared by all threads and read, then written with a thread switch possible in
    between (here a call; on a free-threaded Python any update) loses recordings in such a burst."""
    shared = [0]

    def record() -> None:
        shared[0] = _plus_one(shared[0])

    for _ in range(3):  # likely in one burst, not certain
        shared[0] = 0
        if _lost(8, 20_000, record, lambda: shared[0]) > 0:
            return
    raise AssertionError("three bursts lost no count: the check could not tell a lossy tally")


def test_the_chain_run_from_several_threads_at_once_counts_every_run() -> None:
    metrics, state, threads, each = Metrics(ClusterState()), make_state(), 6, 1500
    req = request(pod())

    def work() -> None:
        for _ in range(each):
            chain.validate(req, state, chain.Settings(), rules=(_Rule("allows"), _Rule("again")),
                           rule_times=metrics.rule_times)

    _burst(threads, work)
    samples = _samples(metrics)
    for rule in ("allows", "again"):
        assert samples[(NAME + "_count", "validate", "CREATE", rule)] == threads * each, rule
