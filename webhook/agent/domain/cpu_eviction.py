"""CPU eviction as koordlet v1.8 does it (``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go``), pure.

Three features, each a task of what to release and the pods to release it from, run in koordlet's order and
accounted together (``pkg/koordlet/qosmanager/plugins/util/evict.go``, ``KillAndEvictPods``):

- ``BECPUEvict``: BE pods starved. satisfaction = BE limit / BE request, where the limit is the besteffort tier's
  real limit (min(cpuset cores, quota / period), ``evictByRealLimit``) or the node's batch-cpu allocatable
  (``evictByAllocatable``); the request is the BE pods' batch-cpu requests. When BE use their limit
  (usage / limit ≥ cpuEvictBEUsageThresholdPercent, 90; a limit under one core counts as used) and the
  satisfaction is at most cpuEvictBESatisfactionLowerPercent, release request × (upper − satisfaction) of
  batch-cpu requests, from the averages over cpuEvictTimeWindowSeconds and the current figures both (the smaller).
  BE pods by spec.priority, then CPU usage over request, highest first.
- ``CPUAllocatableEvict``: the requests of the pods up to allocatableEvictPriorityThreshold, by the resource their
  class asks for (batch-cpu, mid-cpu, cpu), over the node's allocatable of it: past
  cpuAllocatableEvictThresholdPercent, release down to cpuAllocatableEvictLowerPercent (all of it where the node
  has none). Pods by priority, koordinator.sh/priority, request, largest first.
- ``CPUEvict``: node CPU usage averaged over the window at or past cpuEvictThresholdPercent: release used CPU
  down to cpuEvictLowerPercent from the pods up to evictEnabledPriorityThreshold, by priority,
  koordinator.sh/priority, usage, largest first.

The priority features take only pods labelled ``koordinator.sh/eviction-enabled: "true"``; every feature honours
the eviction-policy annotation (``webhook.agent.domain.eviction.may_evict``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.agent.domain.eviction import EvictionMemory, may_evict
from webhook.agent.domain.priority_eviction import (
    REASON_PREFIX,
    RankedPod,
    TaskVictim,
    allocatable_contribution,
    ranked_fields,
    select_task_victims,
)
from webhook.core.qos import is_be
from webhook.core.resources import BATCH_CPU, CPU

BE_CPU_EVICT, CPU_ALLOCATABLE_EVICT, CPU_EVICT = "BECPUEvict", "CPUAllocatableEvict", "CPUEvict"
FEATURES = (BE_CPU_EVICT, CPU_ALLOCATABLE_EVICT, CPU_EVICT)       # koordlet's order
EVICT_BY_REAL_LIMIT, EVICT_BY_ALLOCATABLE = "evictByRealLimit", "evictByAllocatable"
BE_USAGE_THRESHOLD_PERCENT = 90          # cpuEvictBEUsageThresholdPercent's default
CPU_RELEASE_BUFFER_PERCENT = 2           # cpuEvictLowerPercent's default: the threshold − 2
MIN_ALLOCATABLE_BATCH_MILLI = 1          # a batch-cpu allocatable of 0 counts as this (satisfaction still computed)
COOLDOWN_SECONDS = 20.0                  # koordlet --cpu-evict-cool-time-seconds


@dataclass(frozen=True, slots=True)
class CPUEvictConfig:
    """The CPU eviction keys of resource-threshold-config for one node, resolved (``None``: not configured, the
    feature needing it does not run, as koordlet skips a feature whose config is incomplete)."""

    enable: bool = False
    cpuEvictBESatisfactionUpperPercent: int | None = None
    cpuEvictBESatisfactionLowerPercent: int | None = None
    cpuEvictBEUsageThresholdPercent: int = BE_USAGE_THRESHOLD_PERCENT
    cpuEvictTimeWindowSeconds: int | None = None
    cpuEvictPolicy: str = EVICT_BY_REAL_LIMIT
    cpuEvictThresholdPercent: int | None = None
    cpuEvictLowerPercent: int | None = None          # None: the threshold − 2
    cpuAllocatableEvictThresholdPercent: int = 110
    cpuAllocatableEvictLowerPercent: int = 100
    evictEnabledPriorityThreshold: int | None = None
    allocatableEvictPriorityThreshold: int | None = None

    def on(self, feature: str) -> bool:
        """Whether ``feature``'s keys are all configured (koordlet's ``is*ConfigValid``; the ranges are checked when
        the ConfigMap is parsed)."""
        if not self.enable:
            return False
        if feature == BE_CPU_EVICT:
            return None not in (self.cpuEvictBESatisfactionUpperPercent, self.cpuEvictBESatisfactionLowerPercent)
        if feature == CPU_EVICT:
            return None not in (self.cpuEvictThresholdPercent, self.evictEnabledPriorityThreshold)
        return self.allocatableEvictPriorityThreshold is not None

    @property
    def lower_percent(self) -> int:
        threshold = self.cpuEvictThresholdPercent or 0
        return self.cpuEvictLowerPercent if self.cpuEvictLowerPercent is not None \
            else threshold - CPU_RELEASE_BUFFER_PERCENT


# -- the window of BE and node CPU (koordlet's metric cache, averaged over cpuEvictTimeWindowSeconds) ------------
@dataclass(frozen=True, slots=True)
class CPUPoint:
    """One cycle's figures, milli-cores: BE usage, BE request, BE real limit (None: unknown), node usage."""

    time: float
    be_used: float
    be_request: float
    be_limit: float | None
    node_used: float


@dataclass(frozen=True, slots=True)
class Window:
    points: tuple[CPUPoint, ...] = ()

    def fed(self, point: CPUPoint, seconds: float) -> Window:
        """With ``point`` and without what is older than ``seconds`` before it."""
        return Window((*(p for p in self.points if p.time > point.time - seconds), point))

    def average(self, pick: Callable[[CPUPoint], float | None]) -> tuple[float, int]:
        values = [v for v in (pick(p) for p in self.points) if v is not None]
        return (sum(values) / len(values), len(values)) if values else (0.0, 0)

    def covers(self, seconds: float) -> bool:
        """koordlet's ``isAvgQueryResultValid``: the samples cover at least a third of the window."""
        return bool(self.points) and self.points[-1].time - self.points[0].time >= seconds / 3


# -- the pods ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PodCPU(RankedPod):
    """What CPU eviction needs of one pod: ``resource`` the CPU resource its class requests (batch-cpu, mid-cpu,
    cpu), ``request`` of it and ``used``, milli-cores."""

    be: bool = field(default=False, kw_only=True)                 # Koordinator QoS BE
    batch_request_milli: int = field(default=0, kw_only=True)     # its batch-cpu request (the BE satisfaction's)

    @property
    def request_milli(self) -> int:
        return self.request

    @property
    def used_milli(self) -> int | None:
        return self.used


def pod_cpu(pod: dict[str, Any], request: Mapping[str, int], used_milli: float | None) -> PodCPU:
    """``request``: the pod's CPU requests, milli-cores, by resource name (cpu, batch-cpu, mid-cpu)."""
    return PodCPU(**ranked_fields(pod, CPU, request, None if used_milli is None else int(used_milli)), be=is_be(pod),
                  batch_request_milli=int(request.get(BATCH_CPU, 0)))


# -- what each feature releases --------------------------------------------------------------------------------
def be_usage_high_enough(used: float, limit: float, threshold_percent: int) -> bool:
    """koordlet ``isBECPUUsageHighEnough``: BE use their limit (a limit under one core always counts)."""
    if limit <= 0:
        return False
    if limit < 1000:
        return True
    return used / limit >= threshold_percent / 100


def release_by_satisfaction(request: float, limit: float, lower_percent: int, upper_percent: int) -> int:
    """koordlet ``calculateResourceMilliToReleaseBySatisfaction``: batch-cpu milli-cores to release."""
    if request <= 0:
        return 0
    rate = limit / request
    if rate > lower_percent / 100:
        return 0
    gap = upper_percent / 100 - rate
    return int(request * gap) if gap > 0 else 0


@dataclass(frozen=True, slots=True)
class Satisfaction:
    """What BECPUEvict concluded: the milli-cores of batch-cpu requests to release (0: none), and why."""

    release: int
    why: str
    used: float = 0.0
    request: float = 0.0
    limit: float = 0.0


def be_satisfaction(window: Window, window_seconds: float, allocatable: float | None,
                    cfg: CPUEvictConfig) -> Satisfaction:
    """BECPUEvict's release from the window's averages and its last point (``calculateMilliReleaseByBESatisfaction``).
    ``allocatable``: the node's batch-cpu allocatable, milli-cores (None: not published), for evictByAllocatable."""
    lower, upper = cfg.cpuEvictBESatisfactionLowerPercent or 0, cfg.cpuEvictBESatisfactionUpperPercent or 0
    by_allocatable = cfg.cpuEvictPolicy == EVICT_BY_ALLOCATABLE
    alloc = -1.0 if allocatable is None or allocatable < 0 else float(allocatable or MIN_ALLOCATABLE_BATCH_MILLI)
    if not window.points:
        return Satisfaction(0, "no BE CPU measured yet")
    used, n_used = window.average(lambda p: p.be_used)
    request, _ = window.average(lambda p: p.be_request)
    real, n_limit = window.average(lambda p: p.be_limit)
    limit = alloc if by_allocatable else real
    if not by_allocatable and n_limit < n_used:
        return Satisfaction(0, "the besteffort tier's CPU limit was not read over the window")
    if not window.covers(window_seconds):
        return Satisfaction(0, f"the window of {window_seconds:g} s is not a third full yet")
    if not be_usage_high_enough(used, limit, cfg.cpuEvictBEUsageThresholdPercent):
        return Satisfaction(0, f"BE use {used:.0f}m of their {limit:.0f}m limit on average, below "
                               f"{cfg.cpuEvictBEUsageThresholdPercent}%", used, request, limit)
    release = release_by_satisfaction(request, limit, lower, upper)
    if release <= 0:
        return Satisfaction(0, f"BE satisfaction {limit:.0f}m / {request:.0f}m is above {lower}%",
                            used, request, limit)
    last = window.points[-1]
    now_limit = alloc if by_allocatable else (last.be_limit or 0.0)
    if not be_usage_high_enough(last.be_used, now_limit, cfg.cpuEvictBEUsageThresholdPercent):
        return Satisfaction(0, f"BE use {last.be_used:.0f}m of their {now_limit:.0f}m limit now, below "
                               f"{cfg.cpuEvictBEUsageThresholdPercent}%", used, request, limit)
    if last.be_request != request or now_limit != limit:
        now = release_by_satisfaction(last.be_request, now_limit, lower, upper)
        if now <= 0:
            return Satisfaction(0, f"BE satisfaction {now_limit:.0f}m / {last.be_request:.0f}m is above {lower}% "
                                   "now", used, request, limit)
        release = min(release, now)
    return Satisfaction(release, f"BE satisfaction {limit:.0f}m / {request:.0f}m at most {lower}%, BE using "
                                 f"{used:.0f}m: release {release}m of batch-cpu requests to reach {upper}%",
                        used, request, limit)


def release_by_node_usage(node_used_milli: float, capacity_milli: int, threshold_percent: int,
                          lower_percent: int) -> int:
    """CPUEvict's release (``calculateMilliReleaseByUsedThresholdPercent``): used milli-cores down to the lower."""
    if capacity_milli <= 0:
        return 0
    usage = int(node_used_milli) * 100 // capacity_milli
    if usage < threshold_percent:
        return 0
    return capacity_milli * (usage - lower_percent) // 100


# -- victims -------------------------------------------------------------------------------------------------------
def be_victims(pods: Iterable[PodCPU], feature: str = BE_CPU_EVICT) -> list[PodCPU]:
    """BECPUEvict's order (``getBEPodEvictInfoAndSort``): BE pods, spec.priority ascending, then usage over
    batch-cpu request descending (koordinator.sh/priority between them: this agent's, for ties of priority)."""
    be = [p for p in pods if p.be and p.active and may_evict(p.obj, feature, opt_in=False)]

    def ratio(p: PodCPU) -> float:
        return (p.used_milli or 0) / p.batch_request_milli if p.batch_request_milli > 0 else 0.0
    return sorted(be, key=lambda p: (p.priority, p.sub_priority, -ratio(p), p.namespace, p.name))


@dataclass(frozen=True, slots=True)
class CPUTask:
    """One feature's task: what to release, counted in ``target`` (USED or REQUEST), by resource, over its
    ordered pods."""

    feature: str
    target: str
    release: Mapping[str, int]
    ranked: tuple[PodCPU, ...]
    why: str

    def contribution(self, pod: PodCPU) -> dict[str, int]:
        """What evicting ``pod`` releases of this task's resources (``GetPodResourceFunc``)."""
        if self.feature == CPU_EVICT:
            return {CPU: pod.used_milli or 0}
        if self.feature == BE_CPU_EVICT:
            return {BATCH_CPU: pod.batch_request_milli}
        return allocatable_contribution(pod, self.release)

    @property
    def reason(self) -> str:
        return REASON_PREFIX + self.feature


CPUVictim = TaskVictim[PodCPU]


def select_cpu_victims(tasks: Sequence[CPUTask], memory: EvictionMemory, now: float,
                       try_evict: Callable[[CPUVictim], bool],
                       ) -> tuple[list[CPUVictim], EvictionMemory, dict[str, bool]]:
    """The CPU features' tasks through ``KillAndEvictPods`` (``priority_eviction.select_task_victims``)."""
    return select_task_victims(tasks, memory, now, try_evict)
