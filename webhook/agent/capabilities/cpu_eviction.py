"""CPU eviction (``cpu-eviction``): koordlet v1.8's BECPUEvict, CPUAllocatableEvict and CPUEvict, in that order,
their releases accounted together (webhook.agent.domain.cpu_eviction; koordinator's
``pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go``).

``decide`` reads the cycle's ``Sample`` (each pod's CPU rate, the node's), the besteffort tier's quota
(``CgroupReadings.tier``; its cpuset when cpuset suppression read it, else every CPU) and the node's allocatable,
and keeps the window of BE and node CPU over ``cpuEvictTimeWindowSeconds`` in its own state, fed from the
``Readings`` only. ``act`` evicts through the Eviction API outside the 20 s cooldown (koordlet
``--cpu-evict-cool-time-seconds``, counted from the agent's start as koordlet's is), with koordlet's Event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from webhook.agent.capabilities.contract import Readings
from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain import cpu_eviction as ce
from webhook.agent.domain import priority_eviction as pe
from webhook.agent.domain.cgroup_limits import DEFAULT_CFS_PERIOD, UNLIMITED
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.eviction import EVENT_REASON_SUCCESS, EvictionMemory
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CPUEvictionReport, CycleReport, EvictionReport
from webhook.core.quantity import int_value, milli_value
from webhook.core.resources import BATCH_CPU, CPU, MID_CPU, pod_requests

if TYPE_CHECKING:
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")


@dataclass(frozen=True, slots=True)
class CPUEvictionDecision:
    tasks: list[ce.CPUTask] = field(default_factory=list)
    said: dict[str, str] = field(default_factory=dict)     # feature -> what it concluded (its task's why, or none)


class CpuEviction(Shared):
    names: ClassVar[tuple[Capability, ...]] = (Capability.CPU_EVICTION,)

    def __init__(self, options: AgentOptions, coexistence: Coexistence, actions: KubeActions | None,
                 metrics: AgentMetrics) -> None:
        super().__init__(options, coexistence, actions, metrics)
        self.window = ce.Window()
        self.memory = EvictionMemory()
        self.started: float | None = None    # the first cycle: the cooldown runs from there, as koordlet's does

    def tier_needed(self, inputs: Inputs) -> bool:
        """Whether this cycle's decision reads the besteffort tier's CPU limit (pure: the config)."""
        cfg = inputs.cpu_evict
        return (self.coexistence.on(Capability.CPU_EVICTION) and cfg.on(ce.BE_CPU_EVICT)
                and cfg.cpuEvictPolicy == ce.EVICT_BY_REAL_LIMIT)

    @staticmethod
    def _real_limit(readings: Readings) -> float | None:
        """min(the tier's cpuset cores, its quota / period), milli-cores (koordlet ``getBECPURealMilliLimit``)."""
        sample, cgroups = readings.sample, readings.cgroups
        if sample is None or cgroups is None or cgroups.tier is None:
            return None
        held = cgroups.cpusets.tree.held if cgroups.cpusets is not None else frozenset()
        limit = float((len(held) or sample.num_cpus) * 1000)
        current = cgroups.tier[1]
        if current.quota is None:
            return None
        if current.quota != UNLIMITED:
            limit = min(limit, current.quota * 1000 / (current.period or DEFAULT_CFS_PERIOD))
        return limit

    def decide(self, readings: Readings) -> CPUEvictionDecision:
        inputs, sample = readings.inputs, readings.sample
        cfg = inputs.cpu_evict
        if self.started is None:
            self.started = readings.now
        features = [f for f in ce.FEATURES if cfg.on(f)]
        if not self.coexistence.on(Capability.CPU_EVICTION) or not features or sample is None \
                or sample.node_cpu_milli is None:
            if not features:
                self.window = ce.Window()
            return CPUEvictionDecision()
        status = inputs.status
        alloc = status.get("allocatable") or {}
        cap_q = quantity((status.get("capacity") or {}).get(CPU))
        capacity = milli_value(cap_q) if cap_q is not None and cap_q > 0 else sample.num_cpus * 1000
        used = {uid: u.cpu_milli for uid, u in sample.pods.items()}
        mid = ce.CPU_ALLOCATABLE_EVICT in features      # only the allocatable feature reads mid-cpu requests
        pods = [ce.pod_cpu(v.obj, {CPU: v.cpu_request_milli, BATCH_CPU: v.batch_cpu_request,
                                   MID_CPU: _mid_cpu(v.obj) if mid else 0}, used.get(v.uid)) for v in inputs.pods]
        be_used = sum(u or 0.0 for v in inputs.pods if v.besteffort and (u := used.get(v.uid)) is not None)
        be_request = float(sum(p.batch_request_milli for p in pods if p.be and p.active))
        window_seconds = float(cfg.cpuEvictTimeWindowSeconds or 0)
        self.window = self.window.fed(ce.CPUPoint(readings.now, be_used, be_request, self._real_limit(readings),
                                                  sample.node_cpu_milli), window_seconds)
        tasks, said = [], {}
        for feature in features:
            task = self._task(feature, cfg, pods, alloc, capacity, window_seconds)
            if isinstance(task, str):
                said[feature] = task
            else:
                said[feature] = task.why
                tasks.append(task)
        return CPUEvictionDecision(tasks, said)

    def _task(self, feature: str, cfg: ce.CPUEvictConfig, pods: list[ce.PodCPU], alloc: dict[str, Any],
              capacity: int, window_seconds: float) -> ce.CPUTask | str:
        if feature == ce.BE_CPU_EVICT:
            batch = quantity(alloc.get(BATCH_CPU))
            got = ce.be_satisfaction(self.window, window_seconds, None if batch is None else float(batch), cfg)
            if got.release <= 0:
                return got.why
            return ce.CPUTask(feature, pe.REQUEST, {BATCH_CPU: got.release}, tuple(ce.be_victims(pods)), got.why)
        if feature == ce.CPU_EVICT:
            node_used, _ = self.window.average(lambda p: p.node_used)
            threshold = cfg.cpuEvictThresholdPercent or 0
            release = ce.release_by_node_usage(node_used, capacity, threshold, cfg.lower_percent)
            percent = int(node_used) * 100 // capacity if capacity else 0
            if release <= 0:
                return f"node CPU {percent}% below {threshold}%"
            ranked = pe.priority_victims(pods, feature, cfg.evictEnabledPriorityThreshold or 0,
                                         lambda p: p.used_milli or 0)
            return ce.CPUTask(feature, pe.USED, {CPU: release}, tuple(ranked),
                              f"node CPU {percent}% at or above {threshold}%: release {release}m used down to "
                              f"{cfg.lower_percent}%")
        threshold = cfg.allocatableEvictPriorityThreshold or 0
        node = {r: _milli(r, alloc.get(r)) for r in (CPU, BATCH_CPU, MID_CPU)}
        releases = pe.release_by_allocatable(pods, node, cfg.cpuAllocatableEvictThresholdPercent,
                                             cfg.cpuAllocatableEvictLowerPercent, threshold)
        if not releases:
            return f"requests within {cfg.cpuAllocatableEvictThresholdPercent}% of the allocatable"
        ranked = pe.priority_victims(pods, feature, threshold, lambda p: p.request_milli)
        return ce.CPUTask(feature, pe.REQUEST, releases, tuple(ranked),
                          f"requests past {cfg.cpuAllocatableEvictThresholdPercent}% of the allocatable: release "
                          + ", ".join(f"{v} of {r}" for r, v in sorted(releases.items())))

    def act(self, readings: Readings, decision: CPUEvictionDecision, report: CycleReport) -> None:
        """Evict until each task's release is covered, outside the cooldown; the report says each feature's
        decision and the pods asked to go."""
        if not decision.said:
            return
        now = readings.now
        cooling = self.memory.in_cooldown(now, ce.COOLDOWN_SECONDS) or \
            (self.started is not None and now < self.started + ce.COOLDOWN_SECONDS)
        victims: list[ce.CPUVictim] = []
        covered: dict[str, bool] = {}
        if decision.tasks and not cooling:
            for t in decision.tasks:
                log.info("cpu eviction %s: %s", t.feature, t.why)
            victims, self.memory, covered = ce.select_cpu_victims(decision.tasks, self.memory, now, self._try_evict)
        for t in decision.tasks:
            if cooling:
                log.debug("cpu eviction %s in cooldown: %s", t.feature, t.why)
            elif not covered.get(t.feature, True):
                log.warning("cpu eviction %s could not release all it needs (%s): no more pods it may evict",
                            t.feature, t.why)
        report.cpu_eviction = [CPUEvictionReport(f, why, next((t.release for t in decision.tasks if t.feature == f),
                                                              None), cooling and any(t.feature == f for t in
                                                                                     decision.tasks))
                               for f, why in decision.said.items()]
        report.evictions.extend(EvictionReport(v.pod.namespace, v.pod.name, v.pod.uid, v.pod.priority, 0,
                                               v.feature, v.pod.used_milli) for v in victims)

    def _try_evict(self, v: ce.CPUVictim) -> bool:
        p = v.pod
        return self.evict(p.namespace, p.name, p.uid, v.feature, pe.event_message(p.namespace, p.name, v.feature),
                          EVENT_REASON_SUCCESS, f"priority {p.priority}, cpu {p.used_milli}m, need {dict(v.need)}")


def _milli(resource: str, raw: Any) -> int:
    """A node allocatable in milli-cores: cpu is a quantity of cores, batch-cpu and mid-cpu count milli-cores."""
    q = quantity(raw)
    if q is None:
        return 0
    return milli_value(q) if resource == CPU else int_value(q)


def _mid_cpu(pod: dict[str, Any]) -> int:
    q = pod_requests(pod).get(MID_CPU)
    return int_value(q) if q is not None else 0
