"""BE memory eviction: the slo-controller-config watermark (``memory-eviction``) and the kubelet-style
``--eviction-*`` thresholds (``kubelet-eviction``), evaluated together; victims chosen and evicted
(webhook.agent.domain.thresholds, webhook.agent.domain.eviction).

``decide`` reads node memory and, when a threshold acts, the BE pods' memory from the ``Readings``: the cycle
measures those only when ``pod_memory_needed`` says a threshold acts on the node memory it read."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from webhook.agent.capabilities.contract import MemoryPressure, Readings
from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.eviction import (
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
from webhook.agent.domain.sample import used_memory
from webhook.agent.domain.thresholds import (
    MEMORY_AVAILABLE,
    EngineState,
    Observation,
    PassResult,
    Threshold,
    evaluate,
    watermark_threshold,
)
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport, EvictionReport, MemoryReport
from webhook.core.quantity import int_value
from webhook.core.resources import MEMORY

if TYPE_CHECKING:
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")


@dataclass(frozen=True, slots=True)
class MemoryDecision:
    memory: MemoryReport | None         # None: node memory was not measured
    pressure: bool                      # a threshold is met (or was, within the transition period)
    first_observed: list[str]           # the thresholds met, described for the node condition
    tasks: list[Task] = field(default_factory=list)   # what to release, when a threshold acts

    @property
    def release_target(self) -> int:
        return max((t.need for t in self.tasks), default=0)

    @property
    def pressure_fact(self) -> MemoryPressure:
        """What the node condition reads of this decision."""
        return MemoryPressure(self.pressure, tuple(self.first_observed))


class MemoryEviction(Shared):
    names: ClassVar[tuple[Capability, ...]] = (Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION)

    def __init__(self, options: AgentOptions, coexistence: Coexistence, actions: KubeActions | None,
                 metrics: AgentMetrics) -> None:
        super().__init__(options, coexistence, actions, metrics)
        self.engine = EngineState()
        self.memory = EvictionMemory()
        self.trigger_level: int | None = None    # node usage at which the next memory threshold is met
        self.capacity = 0
        self.seen_used: int | None = None        # node usage the last cycle measured
        self.first_evict_at: float | None = None  # monotonic time of this cycle's first eviction request

    def begin_cycle(self) -> None:
        self.first_evict_at = None

    def _thresholds(self, inputs: Inputs) -> list[Threshold]:
        """The thresholds in force: the watermark (memory-eviction) first, then the --eviction-* ones."""
        thresholds = list(self.options.thresholds) if self.coexistence.on(Capability.KUBELET_EVICTION) else []
        watermark = inputs.memory_evict
        if watermark.enable and self.coexistence.on(Capability.MEMORY_EVICTION):
            thresholds.insert(0, watermark_threshold(watermark.memoryEvictThresholdPercent,
                                                     watermark.memoryEvictLowerPercent))
        return thresholds

    @staticmethod
    def _capacity(memory: tuple[int, int], inputs: Inputs) -> int:
        cap_q = quantity((inputs.status.get("capacity") or {}).get(MEMORY))
        return int_value(cap_q) if cap_q is not None and cap_q > 0 else memory[0]

    def _evaluate(self, now: float, memory: tuple[int, int], inputs: Inputs,
                  thresholds: list[Threshold]) -> tuple[int, int, dict[str, Observation], PassResult]:
        capacity = self._capacity(memory, inputs)
        used = used_memory(*memory)
        obs = {MEMORY_AVAILABLE: Observation(capacity - used, capacity)}
        return capacity, used, obs, evaluate(thresholds, obs, self.engine, now, self.options.transition_period)

    def pod_memory_needed(self, readings: Readings) -> bool:
        """Whether a threshold acts on ``readings``' node memory: only then are the BE pods' memory worth
        measuring (pure; ``decide`` evaluates again, the same way, and keeps the engine's state)."""
        if readings.memory is None:
            return False
        return bool(self._evaluate(readings.now, readings.memory, readings.inputs,
                                   self._thresholds(readings.inputs))[3].acting)

    def decide(self, readings: Readings) -> MemoryDecision:
        """The thresholds over node memory; when one acts, the BE pods' memory ranked into what to release."""
        now, inputs = readings.now, readings.inputs
        if readings.memory is None:
            return MemoryDecision(None, False, [])
        thresholds = self._thresholds(inputs)
        capacity, used, obs, result = self._evaluate(now, readings.memory, inputs, thresholds)
        self.metrics.memory_ratio.labels(self.options.node_name).set(used / capacity if capacity else 0.0)
        self.trigger_level, self.capacity, self.seen_used = trigger_level(thresholds, capacity), capacity, used
        self.engine = result.state
        tasks = []
        if result.acting:  # candidates are only worth ranking when a threshold acts
            be = [v for v in inputs.pods if v.be]
            usage = dict(readings.be_memory or {})
            requests = {id(v.obj): v.memory_request for v in be}
            cands = candidates([v.obj for v in be], usage, lambda _, p: requests[id(p)])
            tasks = build_tasks(result.acting, obs, cands, self.options.node_name)
        return MemoryDecision(MemoryReport(capacity, used), result.pressure,
                              [t.describe() for t in self.engine.first_observed], tasks)

    def act(self, readings: Readings, decision: MemoryDecision, report: CycleReport) -> None:
        """Evict victims until the release target is covered (outside the cooldown); the report lists the ones
        asked to go."""
        if decision.memory is None:
            return
        report.memory, report.release_target_bytes = decision.memory, decision.release_target
        now = readings.now
        if not decision.tasks:
            return
        if self.memory.in_cooldown(now):
            log.debug("memory eviction in cooldown until %.1f", (self.memory.last_evict_time or 0) + 4)
            return
        victims, self.memory = select_victims(decision.tasks, self.memory, now, self._try_evict)
        report.evictions = [EvictionReport(v.candidate.namespace, v.candidate.name, v.candidate.uid,
                                           v.candidate.priority, v.candidate.usage, v.reason) for v in victims]

    def _try_evict(self, v: Victim) -> bool:
        c = v.candidate
        if self.actions is not None and not self.options.dry_run and self.first_evict_at is None:
            self.first_evict_at = time.monotonic()
        reason = EVENT_REASON_SUCCESS if v.reason == EVICT_BY_NODE_MEMORY_USAGE else v.reason
        return self.evict(c.namespace, c.name, c.uid, v.reason, v.message, reason,
                          f"priority {c.priority}, usage {c.usage} bytes, need {v.need}")
