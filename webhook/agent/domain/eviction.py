"""BE memory eviction planning (Koordinator BEMemoryEvict, kubelet ranking), pure.

The thresholds engine (``thresholds.py``) says which memory thresholds act and how many bytes each
needs freed; this module turns that into ordered victims: BE pods only, ranked, taken until their
summed usage covers the amount, with the 4 s cooldown and the 2-minute "already evicted" memory as
explicit inputs and outputs (koordlet's ``pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go``, the
kubelet's ranking in ``pkg/kubelet/eviction/helpers.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from webhook.agent.domain.thresholds import KUBELET, WATERMARK, Observation, Threshold, amount_to_free, node_low_message
from webhook.core.qos import is_be, is_terminal
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
                             bool(meta.get("deletionTimestamp"))))
    return out


def rank_watermark(cands: Iterable[Candidate]) -> list[Candidate]:
    """Koordinator BEMemoryEvict order: spec.priority ascending, usage descending, then namespace/name."""
    return sorted(cands, key=lambda c: (c.priority or 0, -c.usage, c.namespace, c.name))


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
                cands: Sequence[Candidate], node: str) -> list[Task]:
    """Watermark first (Koordinator's task order), then kubelet thresholds by amount, largest first."""
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
        elif t.source == KUBELET:
            msg = node_low_message("memory", t, obs).replace("{", "{{").replace("}", "}}")
            tasks.append(Task(t, KUBELET_EVICTED, need, tuple(rank_kubelet(cands)), msg))
    tasks.sort(key=lambda task: (task.reason != EVICT_BY_NODE_MEMORY_USAGE, -task.need))
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
            victim = Victim(c, task.reason, task.need, task.message.format(name=c.name))
            if try_evict(victim):
                released += c.usage
                evicted[c.uid] = now
                victims.append(victim)
    return victims, EvictionMemory(now if victims else memory.last_evict_time, evicted)
