"""BE memory eviction: the slo-controller-config watermark (``memory-eviction``) and the kubelet-style
``--eviction-*`` thresholds (``kubelet-eviction``), evaluated together; victims chosen and evicted
(webhook.agent.domain.thresholds, webhook.agent.domain.eviction)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.eviction import (
    EVENT_ACTION,
    EVENT_REASON_FAIL,
    EVENT_REASON_SUCCESS,
    EVICT_BY_NODE_MEMORY_USAGE,
    EvictionMemory,
    Task,
    Victim,
    build_tasks,
    candidates,
    select_victims,
)
from webhook.agent.domain.memory_notify import trigger_level
from webhook.agent.domain.thresholds import (
    MEMORY_AVAILABLE,
    EngineState,
    Observation,
    evaluate,
    watermark_threshold,
)
from webhook.agent.edges.actions import EvictOutcome, KubeActions
from webhook.agent.edges.collectors import Collector, used_memory
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import EvictionReport, MemoryReport
from webhook.core.quantity import int_value
from webhook.core.resources import MEMORY

log = logging.getLogger("colocation-agent")


@dataclass(frozen=True, slots=True)
class MemoryDecision:
    memory: MemoryReport
    pressure: bool                      # a threshold is met (or was, within the transition period)
    first_observed: list[str]           # the thresholds met, described for the node condition
    tasks: list[Task] = field(default_factory=list)   # what to release, when a threshold acts

    @property
    def release_target(self) -> int:
        return max((t.need for t in self.tasks), default=0)


class MemoryEviction(Shared):
    def __init__(self, options: AgentOptions, coexistence: Coexistence, actions: KubeActions | None,
                 metrics: AgentMetrics, collector: Collector) -> None:
        super().__init__(options, coexistence, actions, metrics)
        self.collector = collector
        self.engine = EngineState()
        self.memory = EvictionMemory()
        self.trigger_level: int | None = None    # node usage at which the next memory threshold is met
        self.capacity = 0
        self.seen_used: int | None = None        # node usage the last cycle measured
        self.first_evict_at: float | None = None  # monotonic time of this cycle's first eviction request

    def begin_cycle(self) -> None:
        self.first_evict_at = None

    def decide(self, now: float, memory: tuple[int, int], inputs: Inputs) -> MemoryDecision:
        """The thresholds over node memory ((MemTotal, MemAvailable)); when one acts, the BE pods' memory is
        measured and ranked into what to release."""
        total, available = memory
        cap_q = quantity((inputs.status.get("capacity") or {}).get(MEMORY))
        capacity = int_value(cap_q) if cap_q is not None and cap_q > 0 else total
        used = used_memory(total, available)
        obs = {MEMORY_AVAILABLE: Observation(capacity - used, capacity)}
        self.metrics.memory_ratio.labels(self.options.node_name).set(used / capacity if capacity else 0.0)
        thresholds = list(self.options.thresholds) if self.coexistence.on(Capability.KUBELET_EVICTION) else []
        watermark = inputs.memory_evict
        if watermark.enable and self.coexistence.on(Capability.MEMORY_EVICTION):
            thresholds.insert(0, watermark_threshold(watermark.memoryEvictThresholdPercent,
                                                     watermark.memoryEvictLowerPercent))
        self.trigger_level, self.capacity, self.seen_used = trigger_level(thresholds, capacity), capacity, used
        result = evaluate(thresholds, obs, self.engine, now, self.options.transition_period)
        self.engine = result.state
        tasks = []
        if result.acting:  # candidates are only worth measuring and ranking when a threshold acts
            be = [v for v in inputs.pods if v.be]
            usage = self.collector.pod_memory(now, [v.uid for v in be])
            requests = {id(v.obj): v.memory_request for v in be}
            cands = candidates([v.obj for v in be], usage, lambda _, p: requests[id(p)])
            tasks = build_tasks(result.acting, obs, cands, self.options.node_name)
        return MemoryDecision(MemoryReport(capacity, used), result.pressure,
                              [t.describe() for t in self.engine.first_observed], tasks)

    def act(self, now: float, decision: MemoryDecision) -> list[EvictionReport]:
        """Evict victims until the release target is covered (outside the cooldown); the ones asked to go."""
        if not decision.tasks:
            return []
        if self.memory.in_cooldown(now):
            log.debug("memory eviction in cooldown until %.1f", (self.memory.last_evict_time or 0) + 4)
            return []
        victims, self.memory = select_victims(decision.tasks, self.memory, now, self._try_evict)
        return [EvictionReport(v.candidate.namespace, v.candidate.name, v.candidate.uid, v.candidate.priority,
                               v.candidate.usage, v.reason) for v in victims]

    def _try_evict(self, v: Victim) -> bool:
        c = v.candidate
        if self.options.dry_run:
            log.info("dry-run: would evict %s/%s (uid %s, priority %s, usage %d bytes), reason %s, need %d: %s",
                     c.namespace, c.name, c.uid, c.priority, c.usage, v.reason, v.need, v.message)
            return True
        if self.actions is None:
            return True  # planning only (``once``)
        if self.first_evict_at is None:
            self.first_evict_at = time.monotonic()
        result = self.actions.evict(c.namespace, c.name, c.uid)
        pod = {"kind": "Pod", "apiVersion": "v1", "namespace": c.namespace, "name": c.name, "uid": c.uid}
        if result.outcome is not EvictOutcome.EVICTED:
            log.warning("eviction of %s/%s %s (%s): %s", c.namespace, c.name, result.outcome.value,
                        result.code, result.message)
            self.metrics.eviction_failures.labels(v.reason, result.outcome.value).inc()
            if result.outcome is not EvictOutcome.GONE:   # no Event about a pod that is not there
                self.actions.event(pod, EVENT_REASON_FAIL, f"{v.message}, error {result.message or result.outcome}",
                                   EVENT_ACTION)
            return False
        log.info("evicted %s/%s (usage %d bytes), reason %s, need %d", c.namespace, c.name, c.usage,
                 v.reason, v.need)
        self.metrics.evictions.labels(v.reason).inc()
        reason = EVENT_REASON_SUCCESS if v.reason == EVICT_BY_NODE_MEMORY_USAGE else v.reason
        self.actions.event(pod, reason, v.message, EVENT_ACTION)
        return True
