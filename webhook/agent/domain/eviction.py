"""BE memory eviction planning (Koordinator BEMemoryEvict, kubelet ranking), pure.

The thresholds engine (``thresholds.py``) says which memory thresholds act and how many bytes each
needs freed; this module turns that into ordered victims: BE pods only, ranked, taken until their
summed usage covers the amount, with the 4 s cooldown and the 2-minute "already evicted" memory as
explicit inputs and outputs (koordlet's ``pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go``, the
kubelet's ranking in ``pkg/kubelet/eviction/helpers.go``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from webhook.agent.domain.thresholds import KUBELET, WATERMARK, Observation, Threshold, amount_to_free, node_low_message
from webhook.core.priority import (
    DEFAULT_PRIORITY,
    KOORD_BATCH,
    KOORD_NONE,
    KOORD_PROD,
    SUB_PRIORITY_LABEL,
    koord_priority_class,
)
from webhook.core.qos import is_be, is_terminal, koord_qos_class, kube_qos_class
from webhook.core.quantity import int_value
from webhook.core.resources import MEMORY, pod_requests

EVICT_BY_NODE_MEMORY_USAGE = "EvictPodByNodeMemoryUsage"   # the percentage watermark
KUBELET_EVICTED = "Evicted"                                # a kubelet-style threshold
EVENT_REASON_SUCCESS = "evictPodSuccess"
EVENT_REASON_FAIL = "evictPodFail"        # koordlet's, for an eviction the API refused or that failed
EVENT_ACTION = "Evict"                    # events.k8s.io/v1 wants the action taken too
COOLDOWN_SECONDS = 4.0            # koordlet --memory-evict-cool-time-seconds
EVICTED_TTL_SECONDS = 120.0       # koordlet's evicted-pod cache
CRITICAL_PRIORITY = 2000000000    # kubelet never evicts system-critical pods
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# What a pod says about its own eviction (koordinator's apis/extension/constants.go, evict.go and
# pkg/koordlet/qosmanager/plugins/util/evict.go). The features that evict by priority (CPUEvict, MemoryEvict, the
# allocatable ones) take only pods labelled eviction-enabled "true" (upstream's opt-in); every feature, the BE ones
# too, leaves a pod labelled "false" alone (this agent's: an explicit opt-out is never overridden). The policy
# annotation, a JSON list of feature names, restricts which features may evict the pod; one that does not parse
# lets none. Among pods of one priority, the koordinator.sh/priority label orders (lower first).
EVICTION_ENABLED_LABEL = "koordinator.sh/eviction-enabled"
EVICTION_POLICY_ANNOTATION = "koordinator.sh/eviction-policy"
BE_MEMORY_EVICT = "BEMemoryEvict"          # the feature names a policy list may hold
MEMORY_EVICT = "MemoryEvict"               # its task's reason (webhook.agent.domain.memory_eviction)


def eviction_policy_allows(pod: dict[str, Any], feature: str) -> bool:
    """Whether the pod's eviction-policy annotation lets ``feature`` evict it (no annotation: every feature)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(EVICTION_POLICY_ANNOTATION)
    if raw is None:
        return True
    try:
        listed = json.loads(raw)
    except (TypeError, ValueError):
        return False
    return isinstance(listed, list) and feature in listed


def eviction_label(pod: dict[str, Any]) -> str | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(EVICTION_ENABLED_LABEL)
    return value if isinstance(value, str) else None


def may_evict(pod: dict[str, Any], feature: str, opt_in: bool) -> bool:
    """The pod's own say: the policy lets ``feature`` evict it, it is not labelled eviction-enabled "false", and
    (``opt_in``: the features that evict by priority) it is labelled "true"."""
    label = eviction_label(pod)
    return label != "false" and (not opt_in or label == "true") and eviction_policy_allows(pod, feature)


def priority_class(pod: dict[str, Any]) -> str:
    """Koordinator's class with defaults (GetPodPriorityClassWithDefault): the raw class, else the QoS's."""
    raw = koord_priority_class(pod)
    if raw != KOORD_NONE:
        return raw
    qos = koord_qos_class(pod) or {"BestEffort": "BE", "": ""}.get(kube_qos_class(pod), "LS")
    return KOORD_BATCH if qos == "BE" else KOORD_PROD if qos in ("LS", "LSR", "LSE", "SYSTEM") else KOORD_NONE


def priority_value(pod: dict[str, Any]) -> int:
    """spec.priority when set and not 0, else the class's default (GetPodPriorityValueWithDefault)."""
    prio = (pod.get("spec") or {}).get("priority")
    if isinstance(prio, int) and not isinstance(prio, bool) and prio != 0:
        return prio
    return DEFAULT_PRIORITY[priority_class(pod)]


def label_priority(pod: dict[str, Any], default: int) -> int:
    """The koordinator.sh/priority label as an integer (GetPodPriorityLabel), ``default`` when absent or not one."""
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(SUB_PRIORITY_LABEL)
    try:
        return int(raw) if isinstance(raw, str) else default
    except ValueError:
        return default


class EvictOutcome(StrEnum):
    """What an eviction request came to (the API edge, ``webhook.agent.edges.actions``, says which)."""

    EVICTED = "evicted"
    BLOCKED = "blocked"        # 429: a PodDisruptionBudget (or the API's rate limit) said no
    GONE = "gone"              # 404: the pod no longer exists
    CONFLICT = "conflict"      # 409: same name, different UID (recreated)
    FAILED = "failed"          # anything else (5xx, network)


@dataclass(frozen=True, slots=True)
class EvictResult:
    outcome: EvictOutcome
    code: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Candidate:
    namespace: str
    name: str
    uid: str
    priority: int | None
    usage: int                    # working-set bytes (pods we cannot measure are never candidates)
    memory_request: int
    terminating: bool = False     # deletionTimestamp set: already releasing
    sub_priority: int = 0         # the koordinator.sh/priority label (spec.priority when absent)
    watermark: bool = True        # the pod lets BEMemoryEvict evict it (its eviction labels and annotation)


def candidates(pods: Iterable[dict[str, Any]], usage: Mapping[str, int | None],
               memory_request: Callable[[str, dict[str, Any]], int] | None = None) -> list[Candidate]:
    """BE pods that may be evicted: measured, not finished, not critical or mirror pods.

    A pod without a usage figure (no cgroup yet, or gone) is left out: evicting it would release
    an unknown amount, and Koordinator's "usage 0" stand-in evicts pods for nothing.
    ``memory_request(uid, pod)``, when given, answers the pod's memory request (a caller's memo).
    """
    out = []
    for pod in pods:
        if not is_be(pod):
            continue
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid = meta.get("uid") or ""
        used = usage.get(uid)
        if used is None or is_terminal(pod):
            continue
        prio = spec.get("priority")
        prio = prio if isinstance(prio, int) and not isinstance(prio, bool) else None
        if (prio or 0) >= CRITICAL_PRIORITY or MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            continue
        if memory_request is not None:
            requested = memory_request(uid, pod)
        else:
            request = pod_requests(pod).get(MEMORY)
            requested = int_value(request) if request is not None else 0
        out.append(Candidate(meta.get("namespace") or "", meta.get("name") or "", uid, prio, int(used), requested,
                             bool(meta.get("deletionTimestamp")), label_priority(pod, prio or 0),
                             may_evict(pod, BE_MEMORY_EVICT, opt_in=False)))
    return out


def rank_watermark(cands: Iterable[Candidate]) -> list[Candidate]:
    """Koordinator BEMemoryEvict order: spec.priority ascending, the koordinator.sh/priority label ascending,
    usage descending, then namespace/name; only the pods that let BEMemoryEvict evict them."""
    return sorted((c for c in cands if c.watermark),
                  key=lambda c: (c.priority or 0, c.sub_priority, -c.usage, c.namespace, c.name))


def rank_kubelet(cands: Iterable[Candidate]) -> list[Candidate]:
    """kubelet ``rankMemoryPressure``: usage above request first, priority ascending, (usage − request) descending."""
    return sorted(cands, key=lambda c: (c.usage <= c.memory_request, c.priority or 0,
                                        -(c.usage - c.memory_request), c.namespace, c.name))


@dataclass(frozen=True, slots=True)
class Task:
    """One acting threshold: how much to free, for what reason, over which ranked candidates."""

    threshold: Threshold
    reason: str
    need: int
    ranked: tuple[Candidate, ...]
    message: str                      # the event message with ``{name}`` for the pod


def watermark_message(node: str, need: int) -> str:
    return (f"evict Pod:{{name}}, reason: {EVICT_BY_NODE_MEMORY_USAGE}, message: killAndEvictBEPods for "
            f"node({node}), need to release memory: {need}")


def build_tasks(acting: Iterable[Threshold], observations: Mapping[str, Observation],
                cands: Sequence[Candidate], node: str, memory_evict: Sequence[Candidate] | None = None,
                memory_evict_message: str = "") -> list[Task]:
    """Watermark first (Koordinator's task order: BEMemoryEvict, then, with ``memory_evict``, MemoryEvict's ranked
    pods for the same amount, counted with it), then kubelet thresholds by amount, largest first."""
    tasks: list[Task] = []
    for t in acting:
        obs = observations.get(t.signal)
        if obs is None:
            continue
        need = amount_to_free(t, obs)
        if need <= 0:
            continue
        if t.source == WATERMARK:
            tasks.append(Task(t, EVICT_BY_NODE_MEMORY_USAGE, need, tuple(rank_watermark(cands)),
                              watermark_message(node, need)))
            if memory_evict is not None:
                tasks.append(Task(t, MEMORY_EVICT, need, tuple(memory_evict), memory_evict_message))
        elif t.source == KUBELET:
            msg = node_low_message("memory", t, obs).replace("{", "{{").replace("}", "}}")
            tasks.append(Task(t, KUBELET_EVICTED, need, tuple(rank_kubelet(cands)), msg))
    order = {EVICT_BY_NODE_MEMORY_USAGE: 0, MEMORY_EVICT: 1}
    tasks.sort(key=lambda task: (order.get(task.reason, 2), -task.need))
    return tasks


@dataclass(frozen=True, slots=True)
class EvictionMemory:
    """What the evictor remembers between rounds: the last round that evicted, and recent victims."""

    last_evict_time: float | None = None
    evicted: Mapping[str, float] = field(default_factory=dict)   # uid -> when

    def in_cooldown(self, now: float, cooldown: float = COOLDOWN_SECONDS) -> bool:
        return self.last_evict_time is not None and now < self.last_evict_time + cooldown

    def pruned(self, now: float, ttl: float = EVICTED_TTL_SECONDS) -> EvictionMemory:
        return EvictionMemory(self.last_evict_time, {u: t for u, t in self.evicted.items() if now - t < ttl})


@dataclass(frozen=True, slots=True)
class Victim:
    candidate: Candidate
    reason: str
    need: int
    message: str


def select_victims(tasks: Sequence[Task], memory: EvictionMemory, now: float,
                   try_evict: Callable[[Victim], bool] = lambda v: True) -> tuple[list[Victim], EvictionMemory]:
    """Walk the tasks (Koordinator ``KillAndEvictPods``): take victims until released usage covers the need.

    Pods evicted in the last 2 minutes or already terminating count as releasing and are not evicted
    again. ``try_evict`` acts (or not, in dry runs); False (429, error) moves on to the next candidate.
    """
    memory = memory.pruned(now)
    evicted = dict(memory.evicted)
    # Credit what is already on its way out first, so no new victim is taken for memory that is
    # being released anyway (nothing beyond the amount to free).
    releasing = {c.uid: c.usage for task in tasks for c in task.ranked if c.uid in evicted or c.terminating}
    released = sum(releasing.values())
    seen: set[str] = set(releasing)
    victims: list[Victim] = []
    for task in tasks:
        for c in task.ranked:
            if released >= task.need:
                break
            if c.uid in seen:
                continue
            seen.add(c.uid)
            victim = Victim(c, task.reason, task.need, task.message.format(name=c.name, namespace=c.namespace))
            if try_evict(victim):
                released += c.usage
                evicted[c.uid] = now
                victims.append(victim)
    return victims, EvictionMemory(now if victims else memory.last_evict_time, evicted)
