"""Memory eviction: the slo-controller-config watermark (``memory-eviction``) and the kubelet-style
``--eviction-*`` thresholds (``kubelet-eviction``), evaluated together; victims chosen and evicted
(webhook.agent.domain.thresholds, webhook.agent.domain.eviction). Under ``memory-eviction``, koordlet's memory
eviction plugin's three features (``pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go``,
webhook.agent.domain.memory_eviction): BEMemoryEvict (the watermark over BE pods), MemoryEvict (the same watermark
over the pods up to evictEnabledPriorityThreshold, when set) and MemoryAllocatableEvict (memory requests over the
allocatable, when allocatableEvictPriorityThreshold is set).

``decide`` reads node memory and, when a threshold acts or MemoryAllocatableEvict has requests to release, the
pods' memory from the ``Readings``: the cycle measures those (``pods_to_measure``) only when ``pod_memory_needed``
says so on the node memory it read."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from webhook.agent.capabilities.contract import MemoryPressure, Readings
from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain import memory_eviction as me
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.eviction import (
    EVENT_REASON_SUCCESS,
    EVICT_BY_NODE_MEMORY_USAGE,
    MEMORY_EVICT,
    EvictionMemory,
    Task,
    Victim,
    build_tasks,
    candidates,
    select_victims,
)
from webhook.agent.domain.memory_notify import trigger_level
from webhook.agent.domain.priority_eviction import TaskVictim, event_message, select_task_victims
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
from webhook.agent.report import CPUEvictionReport, CycleReport, EvictionReport, MemoryReport
from webhook.core.quantity import int_value
from webhook.core.resources import BATCH_MEMORY, MEMORY, MID_MEMORY

if TYPE_CHECKING:
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")


@dataclass(frozen=True, slots=True)
class MemoryDecision:
    memory: MemoryReport | None         # None: node memory was not measured
    pressure: bool                      # a threshold is met (or was, within the transition period)
    first_observed: list[str]           # the thresholds met, described for the node condition
    tasks: list[Task] = field(default_factory=list)   # what to release, when a threshold acts
    allocatable: me.AllocatableTask | None = None    # MemoryAllocatableEvict's, when it has requests to release
    said: dict[str, str] = field(default_factory=dict)   # MemoryEvict / MemoryAllocatableEvict -> what it concluded

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

    def _priority_features(self, inputs: Inputs) -> tuple[bool, bool]:
        """Whether MemoryEvict and MemoryAllocatableEvict are in force on this node."""
        cfg, on = inputs.memory_evict, self.coexistence.on(Capability.MEMORY_EVICTION)
        return on and cfg.memory_evict, on and cfg.allocatable_evict

    @staticmethod
    def _pods(inputs: Inputs, usage: Mapping[str, int | None]) -> list[me.PodMemory]:
        return [me.memory_pod(v.obj, {MEMORY: v.memory_request, BATCH_MEMORY: v.batch_memory_request,
                                      MID_MEMORY: v.mid_memory_request}, usage.get(v.uid)) for v in inputs.pods]

    def _allocatable(self, inputs: Inputs, pods: list[me.PodMemory]) -> me.AllocatableTask | str:
        alloc = inputs.status.get("allocatable") or {}
        node = {r: int_value(q) if (q := quantity(alloc.get(r))) is not None else 0
                for r in (MEMORY, BATCH_MEMORY, MID_MEMORY)}
        return me.allocatable_task(pods, node, inputs.memory_evict)

    def pods_to_measure(self, inputs: Inputs) -> list[str]:
        """The pods whose memory ``decide`` may rank: the BE pods, and those MemoryEvict or MemoryAllocatableEvict
        could take (up to their priority thresholds)."""
        if not any(self._priority_features(inputs)):
            return [v.uid for v in inputs.pods if v.be]
        ranked = {p.uid for p in self._pods(inputs, {}) if me.may_rank(p, inputs.memory_evict)}
        return [v.uid for v in inputs.pods if v.be or v.uid in ranked]

    def pod_memory_needed(self, readings: Readings) -> bool:
        """Whether a threshold acts on ``readings``' node memory, or MemoryAllocatableEvict has requests to release:
        only then are the pods' memory worth measuring (pure; ``decide`` evaluates again, the same way, and keeps
        the engine's state)."""
        if readings.memory is None:
            return False
        if self._priority_features(readings.inputs)[1] and \
                not isinstance(self._allocatable(readings.inputs, self._pods(readings.inputs, {})), str):
            return True
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
        usage = dict(readings.be_memory or {})
        memory_evict, allocatable_evict = self._priority_features(inputs)
        pods = self._pods(inputs, usage) if memory_evict or allocatable_evict else []
        said: dict[str, str] = {}
        if result.acting:  # candidates are only worth ranking when a threshold acts
            be = [v for v in inputs.pods if v.be]
            requests = {id(v.obj): v.memory_request for v in be}
            cands = candidates([v.obj for v in be], usage, lambda _, p: requests[id(p)])
            ranked = me.memory_evict_candidates(pods, inputs.memory_evict.evictEnabledPriorityThreshold or 0) \
                if memory_evict else None
            tasks = build_tasks(result.acting, obs, cands, self.options.node_name, ranked, me.MEMORY_EVICT_MESSAGE)
        if memory_evict:
            need = _memory_evict_need(tasks)
            said[MEMORY_EVICT] = (f"node memory past the watermark: release {need} bytes used, after BEMemoryEvict"
                                  if need else "node memory below the watermark")
        allocatable = None
        if allocatable_evict:
            got = self._allocatable(inputs, pods)
            allocatable = None if isinstance(got, str) else got
            said[me.MEMORY_ALLOCATABLE_EVICT] = got if isinstance(got, str) else got.why
        return MemoryDecision(MemoryReport(capacity, used), result.pressure,
                              [t.describe() for t in self.engine.first_observed], tasks, allocatable, said)

    def act(self, readings: Readings, decision: MemoryDecision, report: CycleReport) -> None:
        """Evict victims until the release target is covered (outside the cooldown); the report lists the ones
        asked to go."""
        if decision.memory is None:
            return
        report.memory, report.release_target_bytes = decision.memory, decision.release_target
        now = readings.now
        alloc = decision.allocatable
        cooling = self.memory.in_cooldown(now) and bool(decision.tasks or alloc)
        report.memory_eviction = [
            CPUEvictionReport(f, why, _release(decision, f), cooling and _release(decision, f) is not None)
            for f, why in decision.said.items()]
        if not decision.tasks and alloc is None:
            return
        if cooling:
            log.debug("memory eviction in cooldown until %.1f", (self.memory.last_evict_time or 0) + 4)
            return
        # koordlet's order is BEMemoryEvict, MemoryAllocatableEvict, MemoryEvict; MemoryEvict's need is counted with
        # BEMemoryEvict's (the same used memory), MemoryAllocatableEvict's apart (requests), after both here.
        victims, self.memory = select_victims(decision.tasks, self.memory, now, self._try_evict)
        report.evictions = [EvictionReport(v.candidate.namespace, v.candidate.name, v.candidate.uid,
                                           v.candidate.priority, v.candidate.usage, v.reason) for v in victims]
        if alloc is not None:
            log.info("memory eviction %s: %s", alloc.feature, alloc.why)
            taken, self.memory, covered = select_task_victims([alloc], self.memory, now, self._try_evict)
            if not covered[alloc.feature]:
                log.warning("memory eviction %s could not release all it needs (%s): no more pods it may evict",
                            alloc.feature, alloc.why)
            report.evictions.extend(EvictionReport(t.pod.namespace, t.pod.name, t.pod.uid, t.pod.priority,
                                                   t.pod.used or 0, t.feature) for t in taken)

    def _try_evict(self, v: Victim | TaskVictim[me.PodMemory]) -> bool:
        """One victim of the watermark's, the kubelet's or MemoryAllocatableEvict's task evicted."""
        if self.actions is not None and not self.options.dry_run and self.first_evict_at is None:
            self.first_evict_at = time.monotonic()
        if isinstance(v, Victim):
            c = v.candidate
            reason = EVENT_REASON_SUCCESS if v.reason in (EVICT_BY_NODE_MEMORY_USAGE, MEMORY_EVICT) else v.reason
            return self.evict(c.namespace, c.name, c.uid, v.reason, v.message, reason,
                              f"priority {c.priority}, usage {c.usage} bytes, need {v.need}")
        p = v.pod
        return self.evict(p.namespace, p.name, p.uid, v.feature, event_message(p.namespace, p.name, v.feature),
                          EVENT_REASON_SUCCESS, f"priority {p.priority}, {p.resource} request {p.request} bytes, "
                          f"need {dict(v.need)}")


def _release(decision: MemoryDecision, feature: str) -> dict[str, int] | None:
    """What ``feature`` would release this cycle (None: nothing)."""
    if feature == me.MEMORY_ALLOCATABLE_EVICT:
        return dict(decision.allocatable.release) if decision.allocatable is not None else None
    need = _memory_evict_need(decision.tasks)
    return {MEMORY: need} if need else None


def _memory_evict_need(tasks: list[Task]) -> int:
    return next((t.need for t in tasks if t.reason == MEMORY_EVICT), 0)
