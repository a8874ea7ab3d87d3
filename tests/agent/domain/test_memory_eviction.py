"""MemoryEvict and MemoryAllocatableEvict's decisions (webhook.agent.domain.memory_eviction), the cases named after
koordinator v1.8.0's ``pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict_test.go`` they are ported from."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.agent.domain import memory_eviction as me
from webhook.agent.domain.slo_config import MemoryEvict, SloConfigError, parse_slo_config

GI = 1 << 30
BATCH, MID = "kubernetes.io/batch-memory", "kubernetes.io/mid-memory"


def pod(name: str, qos: str, priority: int, labels: dict[str, str] | None = None, phase: str = "Running",
        requests: dict[str, int] | None = None) -> dict[str, Any]:
    """createMemoryEvictTestPod(WithLabels / WithPriority): ``requests`` in bytes by resource."""
    res = {k: str(v) for k, v in (requests or {}).items()}
    return {"metadata": {"name": name, "namespace": "", "uid": name,
                         "labels": {"koordinator.sh/qosClass": qos, **(labels or {})}},
            "spec": {"priority": priority, "containers": [{"name": "main", "resources": {"requests": res,
                                                                                          "limits": res}}]},
            "status": {"phase": phase}}


def figures(p: dict[str, Any], used: int | None = None) -> me.PodMemory:
    req = {k: int(v) for k, v in p["spec"]["containers"][0]["resources"]["requests"].items()}
    return me.memory_pod(p, {"memory": req.get("memory", 0), BATCH: req.get(BATCH, 0), MID: req.get(MID, 0)}, used)


ON = {"koordinator.sh/eviction-enabled": "true"}


def test_getPodEvictInfoAndSortByPriority_test_memoryevict_MemoryEvictThresholdPercent_80() -> None:
    g = 10**9
    pods = [
        (pod("test_failed_pod", "LSR", 1000, {**ON, "koordinator.sh/priority": "1000"}, "Failed"), None),
        (pod("test_evictDisabled_pod", "LSR", 1000, {"koordinator.sh/eviction-enabled": "false",
                                                     "koordinator.sh/priority": "1000"}), 40 * g),
        (pod("test_higher_priority", "LS", 3400, {**ON, "koordinator.sh/priority": "1000"}), 30 * g),
        (pod("test_podPriority_120_2000", "", 120, {**ON, "koordinator.sh/priority": "2000"}), 10 * g),
        (pod("test_podPriority_120_3000", "BE", 120, {**ON, "koordinator.sh/priority": "3000"}), 5 * g),
        (pod("test_podPriority_120_4000", "BE", 120, {**ON, "koordinator.sh/priority": "4000"}), 20 * g),
        (pod("test_podPriority_100_9999", "BE", 100, ON), 10 * g),
        (pod("test_podPriority_100_9999_1", "BE", 100, ON), 11 * g),
    ]
    got = me.memory_evict_candidates([figures(p, u) for p, u in pods], 3000)
    assert [c.name for c in got] == ["test_podPriority_100_9999_1", "test_podPriority_100_9999",
                                     "test_podPriority_120_2000", "test_podPriority_120_3000",
                                     "test_podPriority_120_4000"]
    assert got[0].usage == 11 * g          # bytes (upstream's MemoryUsed is the metric × 1000: not taken)


def batch(name: str, gi: int, priority: int = 5000) -> dict[str, Any]:
    return pod(name, "BE", priority, ON, requests={"memory": gi * GI, BATCH: gi * GI})


def mid(name: str, gi: int, priority: int = 7000) -> dict[str, Any]:
    return pod(name, "LS", priority, ON, requests={"memory": gi * GI, MID: gi * GI})


CFG_80_70 = MemoryEvict(True, memoryAllocatableEvictThresholdPercent=80, memoryAllocatableEvictLowerPercent=70,
                        allocatableEvictPriorityThreshold=5999)


@pytest.mark.parametrize(("name", "pods", "allocatable", "cfg", "release", "contributions"), [
    ("allocatable threshold not exceeded", [batch("batch-pod-1", 20), batch("batch-pod-2", 30)], {BATCH: 100 * GI},
     CFG_80_70, {}, {}),
    ("allocatable threshold exceeded - batch memory", [batch("batch-pod-1", 45), batch("batch-pod-2", 40)],
     {BATCH: 100 * GI}, CFG_80_70, {BATCH: 16106127360},
     {"batch-pod-1": {BATCH: 45 * GI}, "batch-pod-2": {BATCH: 40 * GI}}),
    ("allocatable threshold exceeded - mixed priority", [batch("batch-pod-1", 85), mid("mid-pod-1", 85)],
     {BATCH: 100 * GI, MID: 100 * GI},
     MemoryEvict(True, memoryAllocatableEvictThresholdPercent=80, memoryAllocatableEvictLowerPercent=70,
                 allocatableEvictPriorityThreshold=7999),
     {BATCH: 16106127360, MID: 16106127360}, {"batch-pod-1": {BATCH: 85 * GI}, "mid-pod-1": {MID: 85 * GI}}),
    ("allocatable threshold exceeded - mixed priority, lower AllocatableEvictPriorityThreshold",
     [batch("batch-pod-1", 85), mid("mid-pod-1", 85)], {BATCH: 100 * GI, MID: 100 * GI}, CFG_80_70,
     {BATCH: 16106127360}, {"batch-pod-1": {BATCH: 85 * GI}, "mid-pod-1": {}}),
    ("allocatable threshold = 0", [batch("batch-pod-1", 50)], {BATCH: 100 * GI},
     MemoryEvict(True, memoryAllocatableEvictThresholdPercent=0, memoryAllocatableEvictLowerPercent=0,
                 allocatableEvictPriorityThreshold=5999), {BATCH: 50 * GI}, {"batch-pod-1": {BATCH: 50 * GI}}),
    ("node without allocatable batch-memory resource", [batch("batch-pod-1", 50)], {}, CFG_80_70,
     {BATCH: 50 * GI}, {"batch-pod-1": {BATCH: 50 * GI}}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_calculateReleaseByAllocatableThresholdPercent(name: str, pods: list[dict[str, Any]],
                                                       allocatable: dict[str, int], cfg: MemoryEvict,
                                                       release: dict[str, int],
                                                       contributions: dict[str, dict[str, int]]) -> None:
    measured = [figures(p, GI) for p in pods]
    got = me.allocatable_task(measured, allocatable, cfg)
    if not release:
        assert isinstance(got, str) and "within 80%" in got
        return
    assert not isinstance(got, str)
    assert dict(got.release) == release
    assert {p.name: got.contribution(p) for p in measured} == contributions
    threshold = cfg.allocatableEvictPriorityThreshold or 0
    assert [p.name for p in got.ranked] == [p.name for p in measured if p.priority <= threshold]


def test_allocatable_victims_by_priority_then_request_largest_first() -> None:
    """The "only feature MemoryAllocatableEvict" case's order: same priority, the larger request first; a pod
    not labelled eviction-enabled, or not measured, is never taken."""
    pods = [figures(batch("batch-pod-1", 20), GI), figures(batch("batch-pod-2", 30), GI),
            figures(pod("unlabelled", "BE", 5000, requests={BATCH: 40 * GI}), GI),
            figures(batch("unmeasured", 40)), figures(batch("low", 1, priority=5001), GI)]
    got = me.allocatable_task(pods, {BATCH: 80 * GI}, CFG_80_70)
    assert not isinstance(got, str)
    assert [p.name for p in got.ranked] == ["batch-pod-2", "batch-pod-1", "low"]


def test_may_rank_is_what_the_features_in_force_could_take() -> None:
    p = figures(pod("ls", "LS", 3000, ON))
    assert not me.may_rank(p, MemoryEvict(True))
    assert me.may_rank(p, MemoryEvict(True, evictEnabledPriorityThreshold=3000))
    assert not me.may_rank(p, MemoryEvict(True, evictEnabledPriorityThreshold=2999))
    assert not me.may_rank(p, MemoryEvict(False, evictEnabledPriorityThreshold=3000))
    assert me.may_rank(p, MemoryEvict(True, allocatableEvictPriorityThreshold=3000))


def thr(**keys: Any) -> dict[str, str]:
    import json
    return {"resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True, **keys}})}


@pytest.mark.parametrize(("name", "keys", "memory_evict", "allocatable_evict"), [
    ("BEMemoryEvict - valid config", {"memoryEvictThresholdPercent": 80}, False, False),
    ("MemoryEvict - EvictEnabledPriorityThreshold nil", {"memoryEvictThresholdPercent": 80}, False, False),
    ("MemoryEvict - valid config", {"memoryEvictThresholdPercent": 80, "evictEnabledPriorityThreshold": 3000},
     True, False),
    ("MemoryAllocatableEvict - AllocatableEvictPriorityThreshold nil",
     {"memoryAllocatableEvictThresholdPercent": 80, "memoryAllocatableEvictLowerPercent": 70}, False, False),
    ("MemoryAllocatableEvict - valid config", {"memoryAllocatableEvictThresholdPercent": 80,
                                               "memoryAllocatableEvictLowerPercent": 70,
                                               "allocatableEvictPriorityThreshold": 5999}, False, True),
], ids=lambda v: v if isinstance(v, str) else "")
def test_generateConfigCheck(name: str, keys: dict[str, Any], memory_evict: bool, allocatable_evict: bool) -> None:
    cfg = parse_slo_config(thr(**keys)).for_node({})[1]
    assert (cfg.memory_evict, cfg.allocatable_evict) == (memory_evict, allocatable_evict)


def test_the_allocatable_keys_are_read_with_the_documented_defaults() -> None:
    cfg = parse_slo_config(thr(allocatableEvictPriorityThreshold=5999)).for_node({})[1]
    assert (cfg.memoryAllocatableEvictThresholdPercent, cfg.memoryAllocatableEvictLowerPercent) == (110, 100)
    cfg = parse_slo_config(thr(memoryAllocatableEvictThresholdPercent=90, memoryAllocatableEvictLowerPercent=80,
                               evictEnabledPriorityThreshold=3000)).for_node({})[1]
    assert (cfg.memoryAllocatableEvictThresholdPercent, cfg.memoryAllocatableEvictLowerPercent,
            cfg.evictEnabledPriorityThreshold) == (90, 80, 3000)


@pytest.mark.parametrize(("name", "keys", "error"), [
    ("MemoryAllocatableEvict - MemoryAllocatableEvictThresholdPercent < 0",
     {"memoryAllocatableEvictThresholdPercent": -1}, "memoryAllocatableEvictThresholdPercent"),
    ("MemoryAllocatableEvict - lower not below the threshold",
     {"memoryAllocatableEvictThresholdPercent": 80, "memoryAllocatableEvictLowerPercent": 80},
     "memoryAllocatableEvictLowerPercent (80) must be less than memoryAllocatableEvictThresholdPercent (80)"),
    ("MemoryAllocatableEvict - the default lower not below a threshold of 100",
     {"memoryAllocatableEvictThresholdPercent": 100},
     "memoryAllocatableEvictLowerPercent (100) must be less than memoryAllocatableEvictThresholdPercent (100)"),
    ("MemoryAllocatableEvict - AllocatableEvictPriorityThreshold > PriorityMidValueMax",
     {"allocatableEvictPriorityThreshold": 8000}, "allocatableEvictPriorityThreshold"),
    ("a wrong type", {"memoryAllocatableEvictLowerPercent": "70"}, "memoryAllocatableEvictLowerPercent"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_invalid_memory_eviction_keys_are_refused(name: str, keys: dict[str, Any], error: str) -> None:
    with pytest.raises(SloConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_slo_config(thr(**keys))
