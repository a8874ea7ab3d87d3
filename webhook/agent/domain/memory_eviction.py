"""MemoryEvict (v1.7) and MemoryAllocatableEvict (v1.8) as koordlet v1.8.0 does them, pure
(``pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go``; the rules they share with CPU eviction in
``webhook.agent.domain.priority_eviction``).

One plugin runs three features in this order, their releases accounted together (``KillAndEvictPods``):

- ``BEMemoryEvict``: node memory past the watermark (memoryEvictThresholdPercent, released down to
  memoryEvictLowerPercent): BE pods (``webhook.agent.domain.eviction``, the watermark task).
- ``MemoryAllocatableEvict``: the memory requests of the pods up to allocatableEvictPriorityThreshold, by the
  resource their class asks for (batch-memory, mid-memory, memory), over the node's allocatable of it: past
  memoryAllocatableEvictThresholdPercent, release requests down to memoryAllocatableEvictLowerPercent. Pods by
  priority, koordinator.sh/priority, memory request, largest first.
- ``MemoryEvict``: the same watermark and amount as BEMemoryEvict, over the pods up to
  evictEnabledPriorityThreshold (any QoS, not only BE), by priority, koordinator.sh/priority, memory usage,
  largest first. The two count what they release together: MemoryEvict takes only what BEMemoryEvict left.

The priority features take only pods labelled ``koordinator.sh/eviction-enabled: "true"``, active, measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from webhook.agent.domain.eviction import MEMORY_EVICT as MEMORY_EVICT
from webhook.agent.domain.eviction import Candidate, eviction_label
from webhook.agent.domain.priority_eviction import (
    REQUEST,
    RankedPod,
    allocatable_contribution,
    event_message,
    priority_victims,
    ranked_fields,
    release_by_allocatable,
)
from webhook.agent.domain.slo_config import MemoryEvict
from webhook.core.resources import MEMORY

MEMORY_ALLOCATABLE_EVICT = "MemoryAllocatableEvict"
FEATURES = ("BEMemoryEvict", MEMORY_ALLOCATABLE_EVICT, MEMORY_EVICT)     # koordlet's order


PodMemory: TypeAlias = RankedPod   # ``resource`` the memory resource its class requests, ``request``, ``used`` bytes


def memory_pod(pod: dict[str, Any], request: Mapping[str, int], used: int | None) -> PodMemory:
    """``request``: the pod's memory requests, bytes, by resource name (memory, batch-memory, mid-memory)."""
    return PodMemory(**ranked_fields(pod, MEMORY, request, used))


def may_rank(p: PodMemory, cfg: MemoryEvict) -> bool:
    """Whether a priority feature in force could take ``p`` (before its usage is measured: active, labelled
    eviction-enabled, up to its priority threshold): what the cycle measures beside the BE pods."""
    return p.active and eviction_label(p.obj) == "true" and any(t is not None and p.priority <= t for t in (
        cfg.evictEnabledPriorityThreshold if cfg.memory_evict else None,
        cfg.allocatableEvictPriorityThreshold if cfg.allocatable_evict else None))


def memory_evict_candidates(pods: Iterable[PodMemory], priority_threshold: int) -> list[Candidate]:
    """MemoryEvict's victims, in order (``getPodEvictInfoAndSortByUsed``), as the watermark's candidates."""
    ranked = priority_victims(pods, MEMORY_EVICT, priority_threshold, lambda p: p.used or 0)
    return [Candidate(p.namespace, p.name, p.uid, p.priority, p.used or 0, p.request, p.terminating,
                      p.sub_priority) for p in ranked]


MEMORY_EVICT_MESSAGE = event_message("{namespace}", "{name}", MEMORY_EVICT)   # formatted per pod


@dataclass(frozen=True, slots=True)
class AllocatableTask:
    """MemoryAllocatableEvict's task (a ``priority_eviction.ReleaseTask``): requests to release by resource."""

    feature: ClassVar[str] = MEMORY_ALLOCATABLE_EVICT
    target: ClassVar[str] = REQUEST
    release: Mapping[str, int]
    ranked: tuple[PodMemory, ...]
    why: str

    def contribution(self, pod: PodMemory) -> dict[str, int]:
        return allocatable_contribution(pod, self.release)


def allocatable_task(pods: list[PodMemory], allocatable: Mapping[str, int], cfg: MemoryEvict) -> AllocatableTask | str:
    """MemoryAllocatableEvict's task over ``pods``, or why there is none. ``allocatable``: bytes by resource."""
    threshold = cfg.allocatableEvictPriorityThreshold or 0
    releases = release_by_allocatable(pods, allocatable, cfg.memoryAllocatableEvictThresholdPercent,
                                      cfg.memoryAllocatableEvictLowerPercent, threshold)
    if not releases:
        return f"memory requests within {cfg.memoryAllocatableEvictThresholdPercent}% of the allocatable"
    ranked = priority_victims(pods, MEMORY_ALLOCATABLE_EVICT, threshold, lambda p: p.request)
    return AllocatableTask(releases, tuple(ranked),
                           f"memory requests past {cfg.memoryAllocatableEvictThresholdPercent}% of the allocatable: "
                           f"release down to {cfg.memoryAllocatableEvictLowerPercent}%: "
                           + ", ".join(f"{v} of {r}" for r, v in sorted(releases.items())))
