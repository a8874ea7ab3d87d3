"""CPU eviction's decisions (webhook.agent.domain.cpu_eviction), the cases named after koordinator v1.8.0's
``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict_test.go`` where they are ported from it."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.agent.domain import cpu_eviction as ce
from webhook.agent.domain import priority_eviction as pe
from webhook.agent.domain.eviction import EvictionMemory
from webhook.agent.domain.slo_config import SloConfigError, parse_slo_config
from webhook.core.resources import BATCH_CPU, CPU, MID_CPU

# thresholdConfig: the default strategy with upper 40, lower 30; thresholdConfig1: usage threshold 50;
# thresholdConfig2: that and evictByAllocatable.
CFG = ce.CPUEvictConfig(enable=True, cpuEvictBESatisfactionUpperPercent=40, cpuEvictBESatisfactionLowerPercent=30)
CFG1 = ce.CPUEvictConfig(enable=True, cpuEvictBESatisfactionUpperPercent=40, cpuEvictBESatisfactionLowerPercent=30,
                         cpuEvictBEUsageThresholdPercent=50)
CFG2 = ce.CPUEvictConfig(enable=True, cpuEvictBESatisfactionUpperPercent=40, cpuEvictBESatisfactionLowerPercent=30,
                         cpuEvictBEUsageThresholdPercent=50, cpuEvictPolicy=ce.EVICT_BY_ALLOCATABLE)
Q = tuple[float, float, float]      # (cpuRealLimit, cpuUsed, cpuRequest), milli-cores


def window(avg: Q | None, current: Q | None) -> ce.Window:
    """A window whose averages are ``avg`` and whose last point is ``current`` (the upstream test's two queries)."""
    if avg is None:
        return ce.Window()
    cur = current if current is not None else avg
    first = tuple(2 * a - c for a, c in zip(avg, cur, strict=True))
    return ce.Window((ce.CPUPoint(0.0, first[1], first[2], first[0], 0.0),
                      ce.CPUPoint(1.0, cur[1], cur[2], cur[0], 0.0)))


@pytest.mark.parametrize(("name", "cfg", "avg", "current", "allocatable", "expect"), [
    ("test_avgMetricQueryResult_Error", CFG, None, None, 30000, 0),
    ("test_avgMetricQueryResult_count_not_enough", CFG, (0, 0, 0), None, 30000, 0),
    ("test_avgMetricQueryResult_CPURealLimit_zero", CFG, (0, 20000, 0), None, 30000, 0),
    ("test_avgMetricQueryResult_cpuUsage_not_enough", CFG, (20000, 10000, 0), None, 30000, 0),
    ("test_avgMetricQueryResult_cpuRequest_zero", CFG, (20000, 19000, 0), None, 30000, 0),
    ("test_avgMetricQueryResult_ResourceSatisfaction_enough", CFG, (20000, 19000, 40000), None, 30000, 0),
    ("test_avgMetricQueryResult_need_release_but_currentMetricQueryResult_invalid", CFG,
     (10000, 9500, 50000), (0, 0, 0), 30000, 0),
    ("test_avgMetricQueryResult_need_release_but_currentMetricQueryResult_cpuUsage_not_enough", CFG,
     (10000, 9500, 50000), (10000, 5000, 50000), 30000, 0),
    ("test_avgRelease>currentRelease", CFG, (10000, 9500, 50000), (14000, 13000, 50000), 30000, 6000),
    ("test_avgRelease<currentRelease", CFG, (13000, 12000, 50000), (11000, 10000, 50000), 30000, 7000),
    ("test_BEUsageThresholdPercent_50_avgMetricQueryResult_cpuUsage_not_enough", CFG1, (20000, 9000, 0), None,
     30000, 0),
    ("test_BEUsageThresholdPercent_50_avgMetricQueryResult_need_release_but_currentMetricQueryResult_cpuUsage_not_"
     "enough", CFG1, (10000, 6000, 50000), (10000, 4000, 50000), 30000, 0),
    ("test_BEUsageThresholdPercent_50_avgRelease>currentRelease", CFG1, (10000, 6000, 50000), (14000, 8000, 50000),
     30000, 6000),
    ("test_BEUsageThresholdPercent_50_avgMetricQueryResult_skip_release_when_allocatable_small_but_policy_by_"
     "reallimit", CFG1, (10000, 6000, 50000), (10000, 4000, 50000), 8000, 0),
    ("test_BEUsageThresholdPercent_50_avgMetricQueryResult_need_release_since_allocatable_is_small", CFG2,
     (10000, 6000, 50000), (10000, 4000, 50000), 8000, 12000),
    ("test_BEUsageThresholdPercent_50_avgMetricQueryResult_need_release_since_allocatable_is_zero", CFG2,
     (10000, 6000, 50000), (10000, 4000, 50000), 0, 20000 - ce.MIN_ALLOCATABLE_BATCH_MILLI),
], ids=lambda v: v if isinstance(v, str) else "")
def test_calculate_milli_release_by_be_satisfaction(name: str, cfg: ce.CPUEvictConfig, avg: Q | None,
                                                    current: Q | None, allocatable: float, expect: int) -> None:
    got = ce.be_satisfaction(window(avg, current), 0, allocatable, cfg)
    assert got.release == expect, got.why


def test_a_window_not_a_third_full_releases_nothing() -> None:
    """isAvgQueryResultValid: samples covering under a third of cpuEvictTimeWindowSeconds are not enough."""
    starved = ce.Window((ce.CPUPoint(0.0, 9500, 50000, 10000, 0.0), ce.CPUPoint(9.0, 9500, 50000, 10000, 0.0)))
    assert ce.be_satisfaction(starved, 30, None, CFG).release == 0
    assert ce.be_satisfaction(starved, 27, None, CFG).release == 10000     # 50000 × (40 % − 20 %)


def test_the_window_keeps_only_its_seconds() -> None:
    w = ce.Window()
    for t in range(10):
        w = w.fed(ce.CPUPoint(float(t), float(t), 0, None, 0), 3)
    assert [p.time for p in w.points] == [7.0, 8.0, 9.0]
    assert w.average(lambda p: p.be_used) == (8.0, 3)
    assert w.average(lambda p: p.be_limit) == (0.0, 0)


def pod(name: str, *, request: int = 0, priority: int | None = None, qos: str = "BE", phase: str = "Running",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        resource: str = BATCH_CPU, used: float | None = 0) -> ce.PodCPU:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns", "uid": name,
                                        "labels": {"koordinator.sh/qosClass": qos, **(labels or {})},
                                        "annotations": annotations or {}},
                           "spec": {"priority": priority} if priority is not None else {},
                           "status": {"phase": phase}}
    return ce.pod_cpu(obj, {resource: request}, used)


def test_get_be_pod_evict_info_and_sort_test_sort() -> None:
    pods = [pod("pod_lsr", qos="LSR", request=16000, resource=CPU, used=12000),
            pod("pod_ls", qos="LS", request=16000, resource=CPU, used=12000),
            pod("pod_be_1_priority100", request=16000, priority=100, used=3000),
            pod("pod_be_2_priority100", request=16000, priority=100, used=4000),
            pod("pod_be_3_priority10", request=16000, priority=10, used=4000)]
    got = ce.be_victims(pods)
    assert [p.name for p in got] == ["pod_be_3_priority10", "pod_be_2_priority100", "pod_be_1_priority100"]
    assert [(p.batch_request_milli, p.used_milli) for p in got] == [(16000, 4000), (16000, 4000), (16000, 3000)]


@pytest.mark.parametrize(("name", "used", "threshold", "lower", "expect"), [
    ("test_cpuevict_CPUEvictThresholdPercent_lower78", 81000, 80, None, 3000),
    ("test_cpuevict_CPUEvictThresholdPercent_lower80", 81000, 80, 80, 1000),
    ("lower than threshold", 11000, 80, None, 0),
])
def test_calculate_release_by_used_threshold_percent(name: str, used: float, threshold: int, lower: int | None,
                                                     expect: int) -> None:
    cfg = ce.CPUEvictConfig(enable=True, cpuEvictThresholdPercent=threshold, cpuEvictLowerPercent=lower,
                            evictEnabledPriorityThreshold=3000)
    assert ce.release_by_node_usage(used, 100000, threshold, cfg.lower_percent) == expect


MID = {"koordinator.sh/priority-class": "koord-mid"}


@pytest.mark.parametrize(("name", "allocatable", "pods", "threshold", "lower", "priority", "expect"), [
    ("allocatable threshold not exceeded", {BATCH_CPU: 100},
     [pod("batch-pod-1", request=2 * 0, priority=100), pod("batch-pod-2", request=3 * 0, priority=100)],
     80, 70, 5999, {}),
    ("allocatable threshold exceeded - batch cpu", {BATCH_CPU: 100000},
     [pod("batch-pod-1", request=45000, priority=5000), pod("batch-pod-2", request=40000, priority=5000)],
     80, 70, 5999, {BATCH_CPU: 15000}),
    ("allocatable threshold exceeded - mixed priority", {BATCH_CPU: 100000, MID_CPU: 100000},
     [pod("batch-pod-1", request=85000, priority=5000),
      pod("mid-pod-1", qos="LS", request=85000, priority=7000, resource=MID_CPU)],
     80, 70, 7999, {BATCH_CPU: 15000, MID_CPU: 15000}),
    ("allocatable threshold exceeded - mixed priority, lower AllocatableEvictPriorityThreshold",
     {BATCH_CPU: 100000, MID_CPU: 100000},
     [pod("batch-pod-1", request=85000, priority=5000),
      pod("mid-pod-1", qos="LS", request=85000, priority=7000, resource=MID_CPU)],
     80, 70, 5999, {BATCH_CPU: 15000}),
    ("allocatable threshold = 0", {BATCH_CPU: 100000, MID_CPU: 100000},
     [pod("batch-pod-1", request=85000, priority=5000)], 0, 0, 5999, {BATCH_CPU: 85000}),
    ("node without allocatable batch-cpu resource", {},
     [pod("batch-pod-1", request=85000, priority=5000)], 80, 70, 5999, {BATCH_CPU: 85000}),
])
def test_calculate_milli_release_by_allocatable_threshold_percent(
        name: str, allocatable: dict[str, int], pods: list[ce.PodCPU], threshold: int, lower: int, priority: int,
        expect: dict[str, int]) -> None:
    assert pe.release_by_allocatable(pods, allocatable, threshold, lower, priority) == expect


def test_a_mid_pod_requests_mid_cpu() -> None:
    p = ce.pod_cpu({"metadata": {"name": "m", "labels": MID}, "spec": {"priority": 7000}}, {MID_CPU: 3000}, 1)
    assert (p.resource, p.request_milli, p.priority) == (MID_CPU, 3000, 7000)


# -- the configuration (isSatisfactionConfigValid, isUsedThresholdConfigValid, isAllocatableThresholdConfigValid) --
def parse(**keys: Any) -> ce.CPUEvictConfig:
    import json
    cfg = parse_slo_config({"resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True, **keys}})})
    return cfg.cpu_evict_for_node({})


@pytest.mark.parametrize(("name", "keys", "error"), [
    ("test_lowPercent_invalid", {"cpuEvictBESatisfactionLowerPercent": 0, "cpuEvictBESatisfactionUpperPercent": 50},
     "cpuEvictBESatisfactionLowerPercent: Input should be greater than 0"),
    ("test_lowPercent_invalid above 60", {"cpuEvictBESatisfactionLowerPercent": 61,
                                          "cpuEvictBESatisfactionUpperPercent": 70},
     "cpuEvictBESatisfactionLowerPercent: Input should be less than or equal to 60"),
    ("test_upperPercent_invalid", {"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 100},
     "cpuEvictBESatisfactionUpperPercent: Input should be less than 100"),
    ("test_lowPercent>upperPercent", {"cpuEvictBESatisfactionLowerPercent": 40,
                                      "cpuEvictBESatisfactionUpperPercent": 30},
     "cpuEvictBESatisfactionUpperPercent (30) must not be less than cpuEvictBESatisfactionLowerPercent (40)"),
    ("test_nil (one of the two)", {"cpuEvictBESatisfactionLowerPercent": 30},
     "cpuEvictBESatisfactionLowerPercent is set but cpuEvictBESatisfactionUpperPercent is not"),
    ("CPUEvictThresholdPercent < 0", {"cpuEvictThresholdPercent": -1}, "cpuEvictThresholdPercent: Input should be"),
    ("CPUEvictLowerPercent > CPUEvictThresholdPercent", {"cpuEvictThresholdPercent": 80, "cpuEvictLowerPercent": 81},
     "cpuEvictLowerPercent (81) must be less than cpuEvictThresholdPercent (80)"),
    ("CPUAllocatableEvictThresholdPercent < 0", {"cpuAllocatableEvictThresholdPercent": -1},
     "cpuAllocatableEvictThresholdPercent: Input should be greater than or equal to 0"),
    ("CPUAllocatableEvictLowerPercent == CPUAllocatableEvictThresholdPercent",
     {"cpuAllocatableEvictThresholdPercent": 80, "cpuAllocatableEvictLowerPercent": 80},
     "cpuAllocatableEvictLowerPercent (80) must be less than cpuAllocatableEvictThresholdPercent (80)"),
    ("invalid config higher than PriorityMidValueMax", {"allocatableEvictPriorityThreshold": 8000},
     "allocatableEvictPriorityThreshold: Input should be less than or equal to 7999"),
    ("a wrong type", {"cpuEvictTimeWindowSeconds": "60"}, "cpuEvictTimeWindowSeconds: Input should be a valid integer"),
    ("an unknown policy", {"cpuEvictPolicy": "evictByUsage"}, "cpuEvictPolicy: Input should be 'evictByRealLimit'"),
])
def test_invalid_configuration_is_refused_naming_the_key(name: str, keys: dict[str, Any], error: str) -> None:
    with pytest.raises(SloConfigError, match="resource-threshold-config") as got:
        parse(**keys)
    assert error in str(got.value)


@pytest.mark.parametrize(("name", "keys", "on"), [
    ("no thresholdConfig", {}, []),
    ("test_valid (BECPUEvict)", {"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 40},
     [ce.BE_CPU_EVICT]),
    ("EvictEnabledPriorityThreshold nil", {"cpuEvictThresholdPercent": 80}, []),
    ("only feature: CPUEvict", {"cpuEvictThresholdPercent": 80, "evictEnabledPriorityThreshold": 5999},
     [ce.CPU_EVICT]),
    ("only feature: CPUAllocatableEvict", {"allocatableEvictPriorityThreshold": 5999}, [ce.CPU_ALLOCATABLE_EVICT]),
    ("AllocatableEvictPriorityThreshold == PriorityMidValueDefault", {"allocatableEvictPriorityThreshold": 7500},
     [ce.CPU_ALLOCATABLE_EVICT]),
])
def test_a_feature_runs_once_its_keys_are_configured(name: str, keys: dict[str, Any], on: list[str]) -> None:
    cfg = parse(**keys)
    assert [f for f in ce.FEATURES if cfg.on(f)] == on


def test_the_defaults_are_upstreams() -> None:
    cfg = parse()
    assert (cfg.cpuEvictBEUsageThresholdPercent, cfg.cpuEvictPolicy, cfg.cpuAllocatableEvictThresholdPercent,
            cfg.cpuAllocatableEvictLowerPercent) == (90, "evictByRealLimit", 110, 100)
    assert parse(cpuEvictThresholdPercent=80).lower_percent == 78
    assert not parse(enable=False, allocatableEvictPriorityThreshold=5999).on(ce.CPU_ALLOCATABLE_EVICT)


def test_a_node_strategy_overrides_key_by_key() -> None:
    import json
    cfg = parse_slo_config({"resource-threshold-config": json.dumps({
        "clusterStrategy": {"enable": True, "cpuEvictBESatisfactionLowerPercent": 30,
                            "cpuEvictBESatisfactionUpperPercent": 40},
        "nodeStrategies": [{"name": "big", "nodeSelector": {"matchLabels": {"pool": "big"}},
                            "cpuEvictBESatisfactionLowerPercent": 35}]})})
    assert cfg.cpu_evict_for_node({"pool": "big"}).cpuEvictBESatisfactionLowerPercent == 35
    assert cfg.cpu_evict_for_node({}).cpuEvictBESatisfactionLowerPercent == 30
    with pytest.raises(SloConfigError, match=r"nodeStrategies\[0\]\.cpuEvictBESatisfactionUpperPercent \(40\)"):
        parse_slo_config({"resource-threshold-config": json.dumps({
            "clusterStrategy": {"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 40},
            "nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "big"}},
                                "cpuEvictBESatisfactionLowerPercent": 45}]})})


# -- the pods' own say, the priority features' order, the accounting ------------------------------------------------
ENABLED = {"koordinator.sh/eviction-enabled": "true"}


def test_the_priority_features_take_only_pods_labelled_eviction_enabled() -> None:
    pods = [pod("a", priority=5000, used=100), pod("b", priority=5000, used=100, labels=ENABLED),
            pod("c", priority=5000, used=100, labels={"koordinator.sh/eviction-enabled": "false"})]
    assert [p.name for p in pe.priority_victims(pods, ce.CPU_EVICT, 5999, lambda p: p.used_milli or 0)] == ["b"]
    assert [p.name for p in ce.be_victims(pods)] == ["a", "b"]     # the BE feature needs no opt-in; "false" opts out


@pytest.mark.parametrize(("policy", "allowed"), [
    (None, True), ('["BECPUEvict"]', True), ('["CPUEvict", "BECPUEvict"]', True), ('["BEMemoryEvict"]', False),
    ("[]", False), ("BECPUEvict", False), ("{not json", False), ('{"BECPUEvict": true}', False)])
def test_the_eviction_policy_annotation_names_the_features_allowed(policy: str | None, allowed: bool) -> None:
    annotations = {} if policy is None else {"koordinator.sh/eviction-policy": policy}
    assert bool(ce.be_victims([pod("a", annotations=annotations)])) is allowed


def test_priority_then_the_priority_label_then_usage() -> None:
    pods = [pod("low-used", priority=5000, used=100, labels=ENABLED),
            pod("high-used", priority=5000, used=900, labels=ENABLED),
            pod("labelled-first", priority=5000, used=10, labels={**ENABLED, "koordinator.sh/priority": "1"}),
            pod("lower-priority", priority=3000, qos="LS", resource=CPU, used=1, labels=ENABLED),
            pod("above-threshold", priority=7000, used=5000, labels=ENABLED),
            pod("unmeasured", priority=5000, used=None, labels=ENABLED),
            pod("done", priority=5000, used=5000, labels=ENABLED, phase="Succeeded")]
    got = pe.priority_victims(pods, ce.CPU_EVICT, 5999, lambda p: p.used_milli or 0)
    assert [p.name for p in got] == ["lower-priority", "labelled-first", "high-used", "low-used"]


def test_tasks_share_what_a_victim_releases_and_stop_once_covered() -> None:
    a = pod("a", request=3000, priority=5000, used=2500, labels=ENABLED)
    b = pod("b", request=3000, priority=5000, used=2000, labels=ENABLED)
    c = pod("c", request=3000, priority=5000, used=1000, labels=ENABLED)
    be = ce.CPUTask(ce.BE_CPU_EVICT, pe.REQUEST, {BATCH_CPU: 2000}, (a, b, c), "")
    alloc = ce.CPUTask(ce.CPU_ALLOCATABLE_EVICT, pe.REQUEST, {BATCH_CPU: 5000}, (c, b, a), "")
    used = ce.CPUTask(ce.CPU_EVICT, pe.USED, {CPU: 4000}, (a, b, c), "")
    tried: list[str] = []

    def evict(v: ce.CPUVictim) -> bool:
        tried.append(v.pod.name)
        return v.pod.name != "b"                 # b's eviction is refused (a PodDisruptionBudget)
    victims, memory, covered = ce.select_cpu_victims([be, alloc, used], EvictionMemory(), 10.0, evict)
    # be: a (3000 ≥ 2000); alloc: needs 5000, has 3000: c (6000); used: a + c used 3500 < 4000, b refused.
    assert [(v.pod.name, v.feature) for v in victims] == [("a", ce.BE_CPU_EVICT), ("c", ce.CPU_ALLOCATABLE_EVICT)]
    assert tried == ["a", "c", "b"]
    assert covered == {ce.BE_CPU_EVICT: True, ce.CPU_ALLOCATABLE_EVICT: True, ce.CPU_EVICT: False}
    assert memory.last_evict_time == 10.0 and set(memory.evicted) == {"a", "c"}
    again, _, _ = ce.select_cpu_victims([be], memory, 20.0, evict)
    assert again == []                             # a, evicted 10 s ago, still counts as releasing


def test_the_event_says_what_koordlet_says() -> None:
    assert pe.event_message("ns", "p", ce.BE_CPU_EVICT) == (
        "evict Pod:ns/p, reason: evicted, message: trigger by koordlet feature BECPUEvict, kill pod: p")
