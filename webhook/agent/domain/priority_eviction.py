"""What koordlet's priority eviction features share, for CPU and memory alike, pure.

CPUEvict and MemoryEvict (usage past a threshold), CPUAllocatableEvict and MemoryAllocatableEvict (requests past
the node's allocatable) rank the same pods the same way and account what they release the same way; only the
resource family differs. koordinator v1.8.0: ``pkg/koordlet/qosmanager/plugins/util/evict.go``
(``KillAndEvictPods``, ``GetRequestTypeAndValueFromPod``), and the two plugins' ``getPodEvictInfoAndSortByPriority``
and ``calculate*ReleaseByAllocatableThresholdPercent`` (``cpuevict/cpu_evict.go``, ``memoryevict/memory_evict.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from webhook.agent.domain.eviction import EvictionMemory, label_priority, may_evict, priority_class, priority_value
from webhook.core.priority import KOORD_BATCH, KOORD_MID
from webhook.core.qos import is_terminal

REASON_PREFIX = "trigger by koordlet feature "   # qosmanagerUtil.EvictReasonPrefix
EVICTED = "evicted"                      # the reason koordlet's Evictor is given (EvictedStr)
USED, REQUEST = "podUsed", "podResourceRequest"  # what a task's release is counted in (ReleaseTargetType)


def class_resource(pod: dict[str, Any], native: str) -> str:
    """The resource of ``native``'s family (cpu, memory) the pod's class requests (GetRequestTypeAndValueFromPod):
    koord-batch kubernetes.io/batch-*, koord-mid kubernetes.io/mid-*, any other class the native one."""
    prefix = {KOORD_BATCH: "kubernetes.io/batch-", KOORD_MID: "kubernetes.io/mid-"}.get(priority_class(pod))
    return native if prefix is None else prefix + native


def lifecycle(pod: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the pod is active (Pending or Running, ``IsPodInactive`` negated) and whether it is terminating."""
    phase = (pod.get("status") or {}).get("phase")
    return (not is_terminal(pod) and phase in (None, "Pending", "Running"),
            bool((pod.get("metadata") or {}).get("deletionTimestamp")))


@dataclass(frozen=True, slots=True)
class RankedPod:
    """What the priority features need of a pod (CPU eviction's PodCPU adds its own; memory's is this)."""

    namespace: str
    name: str
    uid: str
    obj: dict[str, Any] = field(repr=False, compare=False)
    priority: int                  # GetPodPriorityValueWithDefault
    sub_priority: int              # the koordinator.sh/priority label, the priority when absent
    resource: str                  # what its class requests of the family (class_resource)
    request: int                   # of that resource (milli-cores, bytes)
    used: int | None               # its usage this cycle; None: not measured
    active: bool = True            # Pending or Running
    terminating: bool = False      # deletionTimestamp set


def ranked_fields(pod: dict[str, Any], native: str, request: Mapping[str, int], used: int | None) -> dict[str, Any]:
    """A ``RankedPod``'s fields for ``pod``: ``request`` its requests of ``native``'s family by resource name."""
    meta = pod.get("metadata") or {}
    resource = class_resource(pod, native)
    prio = priority_value(pod)
    active, terminating = lifecycle(pod)
    return {"namespace": meta.get("namespace") or "", "name": meta.get("name") or "", "uid": meta.get("uid") or "",
            "obj": pod, "priority": prio, "sub_priority": label_priority(pod, prio), "resource": resource,
            "request": int(request.get(resource, 0)), "used": used, "active": active, "terminating": terminating}


P = TypeVar("P", bound=RankedPod)


def release_by_allocatable(pods: Iterable[RankedPod], allocatable: Mapping[str, int], threshold_percent: int,
                           lower_percent: int, priority_threshold: int) -> dict[str, int]:
    """The xxxAllocatableEvict release by resource (``calculate*ReleaseByAllocatableThresholdPercent``): the
    requests of the pods up to ``priority_threshold`` over the node's ``allocatable`` of each resource: past the
    threshold, down to the lower; all of it where the node has none."""
    requested: dict[str, int] = {}
    for p in pods:
        if p.priority <= priority_threshold and p.active:
            requested[p.resource] = requested.get(p.resource, 0) + p.request
    out: dict[str, int] = {}
    for resource, total in requested.items():
        node = allocatable.get(resource, 0)
        if node <= 0:
            out[resource] = total
        elif total / node > threshold_percent / 100:
            out[resource] = int(total - lower_percent / 100 * node)
    return {r: v for r, v in out.items() if v > 0}


def allocatable_contribution(pod: RankedPod, release: Mapping[str, int]) -> dict[str, int]:
    """What evicting ``pod`` releases of an xxxAllocatableEvict task's ``release``: its request, of the resource
    its class asks for, when that resource is to be released (``GetPodResourceFunc``)."""
    return {pod.resource: pod.request} if pod.resource in release else {}


def priority_victims(pods: Iterable[P], feature: str, priority_threshold: int, by: Callable[[P], int]) -> list[P]:
    """The priority features' order (``getPodEvictInfoAndSortByPriority``): active pods up to the threshold,
    labelled eviction-enabled, measured; priority, koordinator.sh/priority ascending, then ``by`` descending."""
    chosen = [p for p in pods if p.active and p.priority <= priority_threshold and p.used is not None
              and may_evict(p.obj, feature, opt_in=True)]
    return sorted(chosen, key=lambda p: (p.priority, p.sub_priority, -by(p), p.namespace, p.name))


def event_message(namespace: str, name: str, feature: str) -> str:
    """The note of koordlet's evictPodSuccess Event (``Evictor.evictPod`` and ``KillAndEvictPods``)."""
    return f"evict Pod:{namespace}/{name}, reason: {EVICTED}, message: {REASON_PREFIX}{feature}, kill pod: {name}"


class ReleaseTask(Protocol[P]):
    """One feature's task (EvictTaskInfo): what to release, counted in ``target`` (USED or REQUEST), by resource,
    over its ordered pods, and what evicting a pod releases of it (``GetPodResourceFunc``)."""

    @property
    def feature(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def release(self) -> Mapping[str, int]: ...
    @property
    def ranked(self) -> Sequence[P]: ...

    def contribution(self, pod: P) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class TaskVictim(Generic[P]):
    pod: P
    feature: str
    need: Mapping[str, int]


def select_task_victims(tasks: Sequence[ReleaseTask[P]], memory: EvictionMemory, now: float,
                        try_evict: Callable[[TaskVictim[P]], bool],
                        ) -> tuple[list[TaskVictim[P]], EvictionMemory, dict[str, bool]]:
    """``KillAndEvictPods``: each task in turn takes its pods until what was released, of every task counted in
    the same target, covers its release; a pod released once counts for every task (the larger of what it gives
    each, per resource). Pods evicted in the last 2 minutes or terminating count as releasing. Returns the
    victims, the memory, and for each task whether it was covered."""
    memory = memory.pruned(now)
    evicted = dict(memory.evicted)
    released: dict[tuple[str, str], int] = {}

    def credit(pod: P) -> None:
        got: dict[tuple[str, str], int] = {}
        for t in tasks:
            for resource, amount in t.contribution(pod).items():
                got[(t.target, resource)] = max(got.get((t.target, resource), 0), amount)
        for k, v in got.items():
            released[k] = released.get(k, 0) + v

    def short(task: ReleaseTask[P]) -> bool:
        return any(released.get((task.target, r), 0) < need for r, need in task.release.items())
    seen: set[str] = set()
    for t in tasks:
        for p in t.ranked:
            if p.uid not in seen and (p.uid in evicted or p.terminating):
                seen.add(p.uid)
                credit(p)
    victims: list[TaskVictim[P]] = []
    for t in tasks:
        for p in t.ranked:
            if not short(t):
                break
            if p.uid in seen:
                continue
            seen.add(p.uid)
            victim = TaskVictim(p, t.feature, t.release)
            if try_evict(victim):
                credit(p)
                evicted[p.uid] = now
                victims.append(victim)
    covered = {t.feature: not short(t) for t in tasks}
    return victims, EvictionMemory(now if victims else memory.last_evict_time, evicted), covered
