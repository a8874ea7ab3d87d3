"""CPU eviction's capability: ``decide`` from hand-made Readings (no collector), and ``act`` through a recording
stand-in for KubeActions: the window fed from the Readings, the start's and the evictions' cooldown, the tier's
real limit, the Event and the metric, the report, dry runs, and the switch."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from prometheus_client import generate_latest

from webhook.agent.capabilities.contract import CgroupReadings, Readings
from webhook.agent.capabilities.cpu_eviction import CpuEviction
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain import cpu_eviction as ce
from webhook.agent.domain.cgroup_limits import UNLIMITED, Current
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.eviction import EvictOutcome, EvictResult
from webhook.agent.domain.sample import Layout, PodUsage, Sample
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.inputs import Inputs, pod_view
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport

BE_LABELS = {"koordinator.sh/qosClass": "BE"}
STARVING = ce.CPUEvictConfig(enable=True, cpuEvictBESatisfactionLowerPercent=60,
                             cpuEvictBESatisfactionUpperPercent=80, cpuEvictTimeWindowSeconds=6)


def be_pod(name: str, batch_cpu: int, labels: dict[str, str] | None = None, priority: int = 5000) -> dict[str, Any]:
    res = {"kubernetes.io/batch-cpu": str(batch_cpu)}
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "labels": {**BE_LABELS, **(labels or {})}},
            "spec": {"priority": priority, "containers": [{"name": "c", "resources": {"requests": res,
                                                                                       "limits": res}}]},
            "status": {"phase": "Running"}}


@dataclass
class Actions:
    """What KubeActions was asked: evictions and Events."""

    refuse: set[str] = field(default_factory=set)
    evicted: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def evict(self, namespace: str, name: str, uid: str) -> EvictResult:
        if name in self.refuse:
            return EvictResult(EvictOutcome.BLOCKED, 429, "Cannot evict pod as it would violate the pod's budget")
        self.evicted.append(name)
        return EvictResult(EvictOutcome.EVICTED)

    def event(self, regarding: dict[str, Any], reason: str, note: str, action: str, type_: str = "Warning") -> bool:
        self.events.append((regarding["name"], reason, note))
        return True


def capability(actions: Actions | None = None, dry_run: bool = False,
               disabled: frozenset[Capability] = frozenset()) -> tuple[CpuEviction, AgentMetrics]:
    metrics = AgentMetrics()
    options = AgentOptions("n1", dry_run=dry_run, disabled=disabled)
    return CpuEviction(options, Coexistence(disabled, metrics), cast(Any, actions), metrics), metrics


def readings(now: float, cfg: ce.CPUEvictConfig, pods: dict[str, tuple[dict[str, Any], float]],
             quota: int | None = 100000, node: dict[str, Any] | None = None) -> Readings:
    """The pods (object, CPU milli-cores used) on a 4-CPU node whose besteffort tier holds ``quota`` µs a period."""
    inputs = Inputs(node or {"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}},
                    [pod_view(p) for p, _ in pods.values()], True, Colocation(), MemoryEvict(), CPUSuppress(), cfg)
    sample = Sample(now, 8 << 30, 4 << 30, 4, sum(u for _, u in pods.values()) + 100,
                    {uid: PodUsage(u, None) for uid, (_, u) in pods.items()})
    tier = ("kubepods/besteffort", Current(quota=quota, period=100000))
    cgroups = CgroupReadings(Layout(1, "cgroupfs", "kubepods", "kubepods"), 4096, True, tier=tier)
    return Readings(now, inputs, None, sample=sample, cgroups=cgroups)


# 3 cores of batch-cpu requested, the tier held to 1 core, BE using it all: satisfaction 33 % ≤ 60 %.
STARVED = {"big": (be_pod("big", 2000), 600.0), "small": (be_pod("small", 1000), 390.0)}


def run(cap: CpuEviction, cfg: ce.CPUEvictConfig, pods: dict[str, tuple[dict[str, Any], float]],
        times: range, quota: int | None = 100000) -> CycleReport:
    report = CycleReport("n1")
    for t in times:
        report = CycleReport("n1")
        r = readings(float(t), cfg, pods, quota)
        cap.act(r, cap.decide(r), report)
    return report


def test_a_starved_be_pod_is_evicted_after_the_start_cooldown_with_koordlets_event() -> None:
    actions = Actions()
    cap, metrics = capability(actions)
    report = run(cap, STARVING, STARVED, range(0, 20))
    assert actions.evicted == []                         # koordlet's 20 s from the start
    assert report.cpu_eviction[0].cooling and report.cpu_eviction[0].release == {"kubernetes.io/batch-cpu": 1400}
    report = run(cap, STARVING, STARVED, range(20, 21))
    # release 3000 × (80 % − 33 %) = 1400m of batch-cpu requests, the highest usage over request first: small
    # (39 %, 1000m requested, short of 1400m), then big (30 %).
    assert actions.evicted == ["small", "big"]
    assert actions.events == [
        ("small", "evictPodSuccess", "evict Pod:ns/small, reason: evicted, message: trigger by koordlet feature "
                                     "BECPUEvict, kill pod: small"),
        ("big", "evictPodSuccess", "evict Pod:ns/big, reason: evicted, message: trigger by koordlet feature "
                                   "BECPUEvict, kill pod: big")]
    assert [(e.name, e.reason, e.cpu_milli) for e in report.evictions] == [("small", "BECPUEvict", 390),
                                                                          ("big", "BECPUEvict", 600)]
    assert report.as_dict()["cpuEviction"][0]["feature"] == "BECPUEvict"
    assert 'colocation_agent_evictions_total{reason="BECPUEvict"} 2.0' in generate_latest(metrics.registry).decode()
    run(cap, STARVING, STARVED, range(21, 40))
    assert len(actions.evicted) == 2                     # the cooldown, then both still counted as releasing


def test_a_be_pod_above_its_satisfaction_is_left_alone() -> None:
    actions = Actions()
    cap, _ = capability(actions)
    report = run(cap, STARVING, STARVED, range(0, 40), quota=UNLIMITED)   # the tier holds all 4 CPUs: 133 %
    assert actions.evicted == []
    assert report.cpu_eviction[0].release is None and "below 90%" in report.cpu_eviction[0].decision


def test_the_window_must_be_a_third_full_and_is_fed_only_from_readings() -> None:
    cfg = ce.CPUEvictConfig(**{**{f: getattr(STARVING, f) for f in STARVING.__dataclass_fields__},
                               "cpuEvictTimeWindowSeconds": 90})
    cap, _ = capability(Actions())
    d = cap.decide(readings(0.0, cfg, STARVED))
    assert d.tasks == [] and "not a third full" in d.said[ce.BE_CPU_EVICT]
    for t in range(1, 31):
        d = cap.decide(readings(float(t), cfg, STARVED))
    assert [t.feature for t in d.tasks] == [ce.BE_CPU_EVICT]
    assert len(cap.window.points) == 31


def test_the_eviction_policy_and_label_keep_a_pod() -> None:
    pods = {"keep": (be_pod("keep", 2000, {"koordinator.sh/eviction-enabled": "false"}), 600.0),
            "other": (be_pod("other", 1000), 390.0)}
    pods["other"][0]["metadata"]["annotations"] = {"koordinator.sh/eviction-policy": '["CPUEvict"]'}
    actions = Actions()
    cap, _ = capability(actions)
    report = run(cap, STARVING, pods, range(0, 21))
    assert actions.evicted == [] and report.evictions == []


def test_a_refused_eviction_moves_on_and_says_it_with_koordlets_fail_event(caplog: pytest.LogCaptureFixture) -> None:
    actions = Actions(refuse={"small"})
    cap, metrics = capability(actions)
    with caplog.at_level(logging.WARNING):
        run(cap, STARVING, STARVED, range(0, 21))
    assert actions.evicted == ["big"]
    assert actions.events[0][:2] == ("small", "evictPodFail")
    assert 'colocation_agent_eviction_failures_total{outcome="blocked",reason="BECPUEvict"} 1.0' in \
        generate_latest(metrics.registry).decode()


def test_cpu_evict_takes_opted_in_pods_by_usage_when_the_node_is_busy() -> None:
    cfg = ce.CPUEvictConfig(enable=True, cpuEvictThresholdPercent=60, evictEnabledPriorityThreshold=5999)
    on = {"koordinator.sh/eviction-enabled": "true"}
    pods = {"a": (be_pod("a", 1000, on), 1500.0), "b": (be_pod("b", 1000, on), 1400.0),
            "c": (be_pod("c", 1000), 3000.0)}            # node 6000m of 4 cores... c not opted in
    actions = Actions()
    cap, _ = capability(actions)
    report = run(cap, cfg, pods, range(0, 21))
    # node used 6000m of 4000m: 150 % → release 4000 × (150 − 58) % = 3680m of used: a (1500), b (1400): short.
    assert actions.evicted == ["a", "b"]
    assert report.cpu_eviction[0].feature == ce.CPU_EVICT and report.cpu_eviction[0].release == {"cpu": 3680}


def test_cpu_allocatable_evict_by_request() -> None:
    cfg = ce.CPUEvictConfig(enable=True, allocatableEvictPriorityThreshold=5999)
    on = {"koordinator.sh/eviction-enabled": "true"}
    pods = {"a": (be_pod("a", 1000, on), 10.0), "b": (be_pod("b", 2000, on), 10.0)}
    node = {"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4", "kubernetes.io/batch-cpu": "2500"}}}
    actions = Actions()
    cap, _ = capability(actions)
    for t in range(0, 21):
        r = readings(float(t), cfg, pods, node=node)
        cap.act(r, cap.decide(r), CycleReport("n1"))
    # 3000 requested of 2500 (120 % > 110 %): release 3000 − 2500 = 500: b, the larger request.
    assert actions.evicted == ["b"]


def test_a_dry_run_logs_and_once_plans(caplog: pytest.LogCaptureFixture) -> None:
    cap, _ = capability(None, dry_run=True)
    with caplog.at_level(logging.INFO):
        report = run(cap, STARVING, STARVED, range(0, 21))
    assert [e.name for e in report.evictions] == ["small", "big"]
    assert "dry-run: would evict ns/small" in caplog.text
    planned, _ = capability(None)
    assert [e.name for e in run(planned, STARVING, STARVED, range(0, 21)).evictions] == ["small", "big"]


def test_turned_off_it_decides_nothing_and_reads_no_tier() -> None:
    cap, _ = capability(Actions(), disabled=frozenset({Capability.CPU_EVICTION}))
    r = readings(0.0, STARVING, STARVED)
    assert cap.decide(r).said == {} and not cap.tier_needed(r.inputs)
    on, _ = capability(Actions())
    assert on.tier_needed(r.inputs)
