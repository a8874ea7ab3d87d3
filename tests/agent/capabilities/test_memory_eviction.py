"""The memory eviction capability's MemoryEvict and MemoryAllocatableEvict, decided from hand-made Readings
(koordinator v1.8.0's ``memory_evict_test.go``, ``Test_memoryEvict``'s cases where named after it)."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from prometheus_client import generate_latest

from tests.agent.capabilities.test_cpu_eviction import Actions
from tests.agent.domain.test_memory_eviction import BATCH, GI, ON, batch, pod
from webhook.agent.capabilities.contract import Readings
from webhook.agent.capabilities.memory_eviction import MemoryEviction
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.inputs import Inputs, pod_view
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport

G = 10**9


def capability(actions: Actions | None = None, dry_run: bool = False,
               disabled: frozenset[Capability] = frozenset()) -> tuple[MemoryEviction, AgentMetrics]:
    metrics = AgentMetrics()
    options = AgentOptions("n1", dry_run=dry_run, disabled=disabled)
    return MemoryEviction(options, Coexistence(disabled, metrics), cast(Any, actions), metrics), metrics


def readings(cfg: MemoryEvict, pods: list[tuple[dict[str, Any], int]], used: int = 115 * G,
             allocatable: dict[str, str] | None = None, now: float = 100.0) -> Readings:
    """A node of 120G (MockTestNode("80", "120G")) using ``used``; the pods with their working set."""
    node = {"status": {"capacity": {"memory": str(120 * G)}, "allocatable": {"memory": str(120 * G),
                                                                              **(allocatable or {})}}}
    inputs = Inputs(node, [pod_view(p) for p, _ in pods], True, Colocation(), cfg, CPUSuppress())
    return Readings(now, inputs, (120 * G, 120 * G - used), {p["metadata"]["uid"]: u for p, u in pods})


def run(cap: MemoryEviction, r: Readings) -> CycleReport:
    report = CycleReport("n1")
    cap.act(r, cap.decide(r), report)
    return report


TEST_PODS = [(pod("test_lsr_pod", "LSR", 1000), 40 * G), (pod("test_ls_pod", "LS", 500), 30 * G),
             (pod("test_noqos_pod", "", 100), 10 * G), (pod("test_be_pod_priority100_1", "BE", 100), 5 * G),
             (pod("test_be_pod_priority100_2", "BE", 100), 20 * G), (pod("test_be_pod_priority120", "BE", 120), 10 * G)]
ALL = MemoryEvict(True, 82, 74, evictEnabledPriorityThreshold=3000, memoryAllocatableEvictThresholdPercent=45,
                  memoryAllocatableEvictLowerPercent=40, allocatableEvictPriorityThreshold=5000)


def test_memoryEvict_feature_BEMemoryEvict_MemoryEvict_MemoryAllocatableEvict_all_ok() -> None:
    """BEMemoryEvict takes the BE pods for the watermark, MemoryAllocatableEvict the larger batch pod for
    batch-memory requests at 50 % of the allocatable (past 45 %, down to 40 %: 10 Gi)."""
    actions = Actions()
    cap, metrics = capability(actions)
    pods = [*TEST_PODS, (batch("batch-pod-1", 20), 10 * G), (batch("batch-pod-2", 30), 20 * G)]
    r = readings(ALL, pods, allocatable={BATCH: str(100 * GI)})
    assert cap.pod_memory_needed(r)
    report = run(cap, r)
    assert [(e.name, e.reason) for e in report.evictions] == [
        ("test_be_pod_priority100_2", "EvictPodByNodeMemoryUsage"), ("test_be_pod_priority100_1",
                                                                     "EvictPodByNodeMemoryUsage"),
        ("test_be_pod_priority120", "EvictPodByNodeMemoryUsage"), ("batch-pod-2", "MemoryAllocatableEvict")]
    assert actions.events[-1] == ("batch-pod-2", "evictPodSuccess", "evict Pod:/batch-pod-2, reason: evicted, "
                                  "message: trigger by koordlet feature MemoryAllocatableEvict, kill pod: batch-pod-2")
    out = report.as_dict()["memoryEviction"]
    assert [(m["feature"], m["release"]) for m in out] == [("MemoryEvict", {"memory": 26200000000}),
                                                          ("MemoryAllocatableEvict", {BATCH: 10 * GI})]
    text = generate_latest(metrics.registry).decode()
    assert 'colocation_agent_evictions_total{reason="MemoryAllocatableEvict"} 1.0' in text
    assert run(cap, r).evictions == []        # the 4 s cooldown


def test_memoryEvict_feature_BEMemoryEvict_MemoryEvict_MemoryEvict_invalid_configuration() -> None:
    """Without evictEnabledPriorityThreshold, MemoryEvict does not run: only the BE pods go."""
    cap, _ = capability(Actions())
    report = run(cap, readings(MemoryEvict(True, 82, 74), TEST_PODS))
    assert [e.name for e in report.evictions] == ["test_be_pod_priority100_2", "test_be_pod_priority100_1",
                                                  "test_be_pod_priority120"]
    assert report.memory_eviction == []


def test_memory_evict_takes_an_eviction_enabled_pod_of_any_qos_after_the_be_pods() -> None:
    """The BE pods release 5G of the 26.2G; MemoryEvict takes the LS pod up to the threshold that is labelled,
    the larger usage first, with koordlet's Event."""
    actions = Actions()
    cap, metrics = capability(actions)
    pods = [(pod("be", "BE", 100), 5 * G), (pod("ls-small", "LS", 2000, ON), 10 * G),
            (pod("ls-big", "LS", 2000, ON), 30 * G), (pod("ls-unlabelled", "LS", 1000), 40 * G),
            (pod("ls-high", "LS", 3001, ON), 50 * G)]
    r = readings(MemoryEvict(True, 82, 74, evictEnabledPriorityThreshold=3000), pods)
    assert sorted(cap.pods_to_measure(r.inputs)) == ["be", "ls-big", "ls-small"]
    report = run(cap, r)
    assert [(e.name, e.reason) for e in report.evictions] == [("be", "EvictPodByNodeMemoryUsage"),
                                                              ("ls-big", "MemoryEvict")]
    assert actions.events[-1] == ("ls-big", "evictPodSuccess", "evict Pod:/ls-big, reason: evicted, message: "
                                  "trigger by koordlet feature MemoryEvict, kill pod: ls-big")
    assert 'colocation_agent_evictions_total{reason="MemoryEvict"} 1.0' in generate_latest(metrics.registry).decode()


def test_memory_evict_below_the_watermark_does_nothing_and_says_so() -> None:
    cap, _ = capability(Actions())
    r = readings(ALL, TEST_PODS, used=60 * G)
    assert not cap.pod_memory_needed(r)
    report = run(cap, r)
    assert report.evictions == []
    assert [m.decision for m in report.memory_eviction] == [
        "node memory below the watermark", "memory requests within 45% of the allocatable"]


def test_allocatable_requests_alone_have_the_pods_measured() -> None:
    cap, _ = capability(Actions())
    cfg = MemoryEvict(True, allocatableEvictPriorityThreshold=5999)
    r = readings(cfg, [(batch("b", 20), G)], used=10 * G, allocatable={BATCH: str(10 * GI)})
    assert cap.pod_memory_needed(r) and cap.pods_to_measure(r.inputs) == ["b"]
    assert not capability(disabled=frozenset({Capability.MEMORY_EVICTION}))[0].pod_memory_needed(r)


def test_a_dry_run_logs_the_allocatable_eviction(caplog: pytest.LogCaptureFixture) -> None:
    actions = Actions()
    cap, _ = capability(actions, dry_run=True)
    cfg = MemoryEvict(True, allocatableEvictPriorityThreshold=5999)
    with caplog.at_level(logging.INFO, "colocation-agent"):
        report = run(cap, readings(cfg, [(batch("b", 20), G)], used=10 * G, allocatable={BATCH: str(10 * GI)}))
    assert actions.evicted == [] and [e.name for e in report.evictions] == ["b"]
    assert "dry-run: would evict /b" in caplog.text and "reason MemoryAllocatableEvict" in caplog.text
