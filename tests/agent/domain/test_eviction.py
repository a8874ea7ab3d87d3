"""The BE memory eviction planner: candidates, ranking, victims until covered, cooldown, evicted cache."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.apiserver import load_exchange
from webhook.agent.domain.eviction import (
    EVICT_BY_NODE_MEMORY_USAGE,
    KUBELET_EVICTED,
    Candidate,
    EvictionMemory,
    Task,
    Victim,
    build_tasks,
    candidates,
    rank_kubelet,
    rank_watermark,
    select_victims,
    watermark_message,
)
from webhook.agent.domain.thresholds import MEMORY_AVAILABLE, Observation, parse_thresholds, watermark_threshold

GI, MI = 2**30, 2**20


def pod(name: str, uid: str, *, qos: str | None = "BE", priority: int | None = 5000, ns: str = "colo",
        memory_request: str | None = None, legacy: bool = False, **extra: Any) -> dict[str, Any]:
    labels = {"koordinator.sh/qosClass": qos} if qos and not legacy else {}
    annotations = {"alibabacloud.com/qosClass": qos} if legacy else {}
    container: dict[str, Any] = {"name": "c"}
    if memory_request:
        container["resources"] = {"requests": {"memory": memory_request}}
    p: dict[str, Any] = {"metadata": {"name": name, "namespace": ns, "uid": uid, "labels": labels,
                                      "annotations": annotations},
         "spec": {"containers": [container]}, "status": {"phase": "Running"}}
    if priority is not None:
        p["spec"]["priority"] = priority
    for k, v in extra.items():
        p["metadata"][k] = v
    return p


def cand(name: str, usage: int, priority: int | None = 5000, request: int = 0, ns: str = "colo") -> Candidate:
    return Candidate(ns, name, f"uid-{name}", priority, usage, request)


def test_candidates_are_be_pods_with_usage_only() -> None:
    pods = [pod("be", "1"), pod("ls", "2", qos="LS"), pod("none", "3", qos=None), pod("legacy", "4", legacy=True),
            pod("unmeasured", "5"), pod("done", "6"), pod("critical", "7", priority=2000001000),
            pod("mirror", "8", annotations={"kubernetes.io/config.mirror": "x"}),
            pod("leaving", "9", deletionTimestamp="2026-01-01T00:00:00Z")]
    pods[5]["status"]["phase"] = "Succeeded"
    usage = {"1": 10, "2": 10, "3": 10, "4": 10, "5": None, "6": 10, "7": 10, "8": 10, "9": 10}
    got = {c.name: c for c in candidates(pods, usage)}
    assert sorted(got) == ["be", "leaving", "legacy"]
    assert got["leaving"].terminating and not got["be"].terminating


@pytest.mark.parametrize("name,cands,expected", [
    ("priority ascending first", [cand("a", 1, 5000), cand("b", 9, 5500), cand("c", 2, 3000)], ["c", "a", "b"]),
    ("then usage descending", [cand("a", 1), cand("b", 3), cand("c", 2)], ["b", "c", "a"]),
    ("then namespace/name", [cand("b", 1, ns="x"), cand("a", 1, ns="y"), cand("c", 1, ns="x")], ["b", "c", "a"]),
    ("nil priority counts as 0", [cand("a", 1, 3000), cand("b", 1, None)], ["b", "a"]),
])
def test_rank_watermark(name: str, cands: list[Candidate], expected: list[str]) -> None:
    assert [c.name for c in rank_watermark(cands)] == expected


@pytest.mark.parametrize("name,cands,expected", [
    ("exceeding request first", [cand("in", 10, 3000, request=100), cand("over", 5, 5000, request=1)], ["over", "in"]),
    ("then priority", [cand("a", 10, 5000), cand("b", 10, 3000)], ["b", "a"]),
    ("then usage above request", [cand("a", 10, request=5), cand("b", 8, request=1)], ["b", "a"]),
])
def test_rank_kubelet(name: str, cands: list[Candidate], expected: list[str]) -> None:
    assert [c.name for c in rank_kubelet(cands)] == expected


def _tasks(cands: list[Candidate], capacity: int, used: int, threshold: int = 70, lower: int = 68) -> list[Task]:
    obs = {MEMORY_AVAILABLE: Observation(capacity - used, capacity)}
    return build_tasks([watermark_threshold(threshold, lower)], obs, cands, "colo-node-1")


@pytest.mark.parametrize("name,usages,need_used,expected", [
    # capacity 100 GiB, lower 68%: used 70 GiB -> need 2 GiB.
    ("one big pod covers it", {"a": 3 * GI, "b": 1 * GI}, 70 * GI, ["a"]),
    ("several until covered, no more", {"a": GI, "b": GI // 2, "c": GI // 2, "d": GI}, 70 * GI, ["a", "d"]),
    ("everything is not enough", {"a": GI // 4, "b": GI // 4}, 70 * GI, ["a", "b"]),
    ("under threshold: nothing", {"a": GI}, 69 * GI, []),
])
def test_victims_until_usage_covers_need(name: str, usages: dict[str, int], need_used: int, expected: list[str]) -> None:
    cands = [cand(n, u) for n, u in usages.items()]
    tasks = _tasks(cands, 100 * GI, need_used) if need_used >= 70 * GI else []
    victims, memory = select_victims(tasks, EvictionMemory(), now=10.0)
    assert [v.candidate.name for v in victims] == expected
    assert all(v.reason == EVICT_BY_NODE_MEMORY_USAGE for v in victims)
    assert memory.last_evict_time == (10.0 if expected else None)


def test_watermark_event_message_matches_the_recorded_event() -> None:
    recorded = load_exchange("events-create-evictpodsuccess")["request"]["body"]["message"]
    assert watermark_message("colo-node-1", 8077889699).format(name="be-evict-ok") == recorded


def test_429_moves_to_next_candidate_and_counts_nothing() -> None:
    cands = [cand("protected", 3 * GI, 3000), cand("ok", 3 * GI), cand("spare", 3 * GI)]
    tasks = _tasks(cands, 100 * GI, 70 * GI)
    tried: list[str] = []

    def try_evict(v: Victim) -> bool:
        tried.append(v.candidate.name)
        return bool(v.candidate.name != "protected")

    victims, _ = select_victims(tasks, EvictionMemory(), 0.0, try_evict)
    assert tried == ["protected", "ok"] and [v.candidate.name for v in victims] == ["ok"]


def test_recently_evicted_pods_count_as_releasing() -> None:
    cands = [cand("a", 3 * GI), cand("b", 3 * GI)]
    tasks = _tasks(cands, 100 * GI, 70 * GI)
    memory = EvictionMemory(last_evict_time=0.0, evicted={"uid-a": 0.0})
    victims, _ = select_victims(tasks, memory, now=60.0)
    assert victims == []                       # a still releasing, covers the need
    victims, _ = select_victims(tasks, memory, now=121.0)
    assert [v.candidate.name for v in victims] == ["a"]   # forgotten after 2 minutes


def test_terminating_pods_count_as_releasing() -> None:
    cands = [Candidate("colo", "a", "uid-a", 5000, 3 * GI, 0, terminating=True), cand("b", 3 * GI)]
    victims, _ = select_victims(_tasks(cands, 100 * GI, 70 * GI), EvictionMemory(), 0.0)
    assert victims == []


@pytest.mark.parametrize("name,last,now,cooling", [("none yet", None, 0.0, False), ("within 4 s", 10.0, 13.9, True),
                                                    ("after 4 s", 10.0, 14.0, False)])
def test_cooldown(name: str, last: float | None, now: float, cooling: bool) -> None:
    assert EvictionMemory(last_evict_time=last).in_cooldown(now) is cooling


def test_kubelet_threshold_task_and_message() -> None:
    (t,) = parse_thresholds(hard="memory.available<1Gi")
    obs = {MEMORY_AVAILABLE: Observation(512 * MI, 8 * GI)}
    tasks = build_tasks([t], obs, [cand("small", 100 * MI), cand("big", 600 * MI)], "n")
    (task,) = tasks
    assert task.reason == KUBELET_EVICTED and task.need == 512 * MI
    victims, _ = select_victims(tasks, EvictionMemory(), 0.0)
    assert [v.candidate.name for v in victims] == ["big"]
    assert victims[0].message == "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "


def test_watermark_task_runs_first_and_shares_released() -> None:
    (kube,) = parse_thresholds(hard="memory.available<40Gi")
    obs = {MEMORY_AVAILABLE: Observation(30 * GI, 100 * GI)}   # used 70%: watermark needs 2Gi, kubelet 10Gi
    tasks = build_tasks([kube, watermark_threshold(70, 68)], obs, [cand("a", 4 * GI), cand("b", 8 * GI, 3000)], "n")
    assert [t.reason for t in tasks] == [EVICT_BY_NODE_MEMORY_USAGE, KUBELET_EVICTED]
    victims, _ = select_victims(tasks, EvictionMemory(), 0.0)
    assert [(v.candidate.name, v.reason) for v in victims] == [("b", EVICT_BY_NODE_MEMORY_USAGE),
                                                               ("a", KUBELET_EVICTED)]


def test_never_a_non_be_pod_even_when_not_enough() -> None:
    pods = [pod("ls", "1", qos="LS", priority=0), pod("be", "2")]
    cands = candidates(pods, {"1": 50 * GI, "2": GI})
    victims, _ = select_victims(_tasks(cands, 100 * GI, 90 * GI), EvictionMemory(), 0.0)
    assert [v.candidate.name for v in victims] == ["be"]
    json.dumps([v.candidate.uid for v in victims])


def test_releasing_pods_are_credited_before_new_victims() -> None:
    # a (ranked first) is refused; b, evicted earlier, already covers the need: nothing new is tried.
    cands = [cand("a", 3 * GI, 3000), cand("b", 3 * GI)]
    tried: list[str] = []

    def note(v: Victim) -> bool:
        tried.append(v.candidate.name)
        return True

    victims, _ = select_victims(_tasks(cands, 100 * GI, 70 * GI), EvictionMemory(None, {"uid-b": 0.0}), 10.0, note)
    assert victims == [] and tried == []


@pytest.mark.parametrize(("name", "labels", "annotations", "evicted"), [
    ("no say", {}, {}, True),
    ("eviction-enabled false", {"koordinator.sh/eviction-enabled": "false"}, {}, False),
    ("eviction-enabled true", {"koordinator.sh/eviction-enabled": "true"}, {}, True),
    ("a policy naming BEMemoryEvict", {}, {"koordinator.sh/eviction-policy": '["BEMemoryEvict"]'}, True),
    ("a policy not naming it", {}, {"koordinator.sh/eviction-policy": '["BECPUEvict"]'}, False),
    ("a policy that is no JSON", {}, {"koordinator.sh/eviction-policy": "BEMemoryEvict"}, False),
])
def test_the_watermark_honours_the_pods_say(name: str, labels: dict[str, str], annotations: dict[str, str],
                                             evicted: bool) -> None:
    p = pod("a", "a")
    p["metadata"]["labels"].update(labels)
    p["metadata"]["annotations"].update(annotations)
    assert [c.name for c in rank_watermark(candidates([p], {"a": 100}))] == (["a"] if evicted else [])


def test_the_watermark_orders_by_the_priority_label_within_a_priority() -> None:
    first, second = pod("first", "u1"), pod("second", "u2")
    first["metadata"]["labels"]["koordinator.sh/priority"] = "10"
    ranked = rank_watermark(candidates([second, first], {"u1": 1, "u2": 100}))
    assert [c.name for c in ranked] == ["first", "second"]     # the label before usage
