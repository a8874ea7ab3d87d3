"""Batch resources (``batch-resources``): batch-cpu and batch-memory computed from the node's measured usage
over the colocation window (webhook.agent.domain.batch_allocatable) and published in the node status, as
koord-manager's noderesource controller does."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from webhook.agent.capabilities.contract import Readings
from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain import batch_allocatable as batchcalc
from webhook.agent.domain.coexistence import Capability, node_status_overwritten
from webhook.agent.domain.sample import Sample
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import UNITS, AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport
from webhook.core.quantity import int_value, milli_value
from webhook.core.resources import BATCH_RESOURCES, CPU, MEMORY

if TYPE_CHECKING:
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")
WRITES_REMEMBERED = 3   # the agent's own node-status writes a late watch may still show


@dataclass(frozen=True, slots=True)
class BatchDecision:
    values: dict[str, int]          # what the report shows ({} when the capability is off)
    wanted: dict[str, int] | None   # what the node status should hold (None: withdrawn)
    reason: str | None              # why a value is 0, held, or raised above the formula
    hold: bool = False              # leave the node's values as they are (nothing new measured)


class BatchResources(Shared):
    names: ClassVar[tuple[Capability, ...]] = (Capability.BATCH_RESOURCES,)

    def __init__(self, options: AgentOptions, coexistence: Coexistence, actions: KubeActions | None,
                 metrics: AgentMetrics) -> None:
        super().__init__(options, coexistence, actions, metrics)
        self.window = batchcalc.UsageWindow(60)
        self.started: float | None = None          # the first cycle's time: holding counts from it
        self.last_update: float | None = None
        self._seen: dict[str, int] | None = None   # the node's batch values the last cycle saw
        self._written: list[dict[str, int]] = []   # the agent's last few writes of them ({}: removed)
        self._held: str | None = None              # the reason last logged for holding
        self._raised: frozenset[str] = frozenset()  # the resources last logged as raised to the pods' requests
        self._withdrawn: str | None = None          # the reason last logged for withdrawing
        self._dry_run_body: dict[str, object] | None = None   # the node-status patch a dry run last logged

    @property
    def on(self) -> bool:
        return self.coexistence.on(Capability.BATCH_RESOURCES)

    def decide(self, readings: Readings) -> BatchDecision:
        """The usage window moved on by the sample (None: not measured), and the batch values from it."""
        now, sample, inputs = readings.now, readings.sample, readings.inputs
        if not self.on:
            return BatchDecision({}, None, None)
        if self.started is None:
            self.started = now
        colo = inputs.colocation
        self.window.seconds = colo.metricAggregateDurationSeconds
        if sample is not None:
            values: dict[str, tuple[float | None, int | None]] = {"": (sample.node_cpu_milli, sample.mem_used)}
            values.update(sample.pods)
            self.window.add(now, values)
        else:
            self.window.expire(now)
        cm_ns, cm_name = self.options.config_map
        why = batchcalc.withheld(colo.enable, f"{cm_ns}/{cm_name}" if inputs.config_found else None,
                                 self.window.last_time, now, colo.degradeTimeMinutes, inputs.config_error)
        if why is None and self.window.average("")[0] is None:
            why = batchcalc.NO_CPU_RATE
        if batchcalc.holding(why, self.started, now, colo.degradeTimeMinutes):
            if why != self._held:
                log.info("batch resources: %s; the node's values are left as they are", why)
                self._held = why
            current = batchcalc.published(inputs.status.get("allocatable"))
            shown = {name: current.get(name, 0) for name in BATCH_RESOURCES}
            self._gauges(shown)
            return BatchDecision(shown, None, f"{why}: the node's values are left as they are", hold=True)
        self._held = None
        computed = self._compute(sample, inputs) if why is None else None
        floor = batchcalc.admitted((v.batch_cpu_request, v.batch_memory_request)
                                   for v in inputs.pods if not v.finished)
        # Withdrawn (colocation off, usage data too old) is 0 but for what bound pods request: they stay admitted.
        result, raised = batchcalc.with_floor(
            computed.resources() if computed is not None else dict.fromkeys(BATCH_RESOURCES, 0), floor)
        wanted: dict[str, int] | None = result if computed is not None or any(result.values()) else None
        if why is not None and colo.enable and why != self._withdrawn:
            log.warning("%s: withdrawing batch resources%s", why,
                        "" if wanted is None else " but for what the pods bound to the node request")
        self._withdrawn = why
        names = frozenset(line.split(" ", 1)[0] for line in raised)
        if names != self._raised:       # said when it starts or stops, not every cycle
            for line in raised:
                log.info("batch resources: %s", line)
            self._raised = names
        zero = batchcalc.zero_reason(why, computed, self.options.node_name if inputs.node is None else None)
        reason = "; ".join([*([zero] if zero else []), *raised]) or None
        self._gauges(result)
        return BatchDecision(result, wanted, reason)

    def _gauges(self, values: dict[str, int]) -> None:
        for name, value in values.items():
            self.metrics.allocatable.labels(node=self.options.node_name, resource=name, unit=UNITS[name]).set(value)

    def _compute(self, sample: Sample | None, inputs: Inputs) -> batchcalc.BatchResult:
        colo = inputs.colocation
        alloc = inputs.status.get("allocatable") or {}
        cpu_q, mem_q = quantity(alloc.get(CPU)), quantity(alloc.get(MEMORY))
        # Without a node object (``once`` on this machine), the machine is the node.
        alloc_cpu = milli_value(cpu_q) if cpu_q is not None else (sample.num_cpus * 1000 if sample else 0)
        alloc_mem = int_value(mem_q) if mem_q is not None else (sample.mem_total if sample else 0)
        node_cpu, node_mem = self.window.average("")
        average = self.window.average
        loads = [batchcalc.PodLoad(v.be, *average(v.uid), v.cpu_request_milli, v.memory_request,
                                   v.overhead_cpu_milli, v.overhead_memory)
                 for v in inputs.pods if not v.finished]
        result = batchcalc.batch_allocatable(alloc_cpu, alloc_mem, node_cpu or 0.0, node_mem or 0.0, loads,
                                             colo.cpuReclaimThresholdPercent, colo.memoryReclaimThresholdPercent,
                                             colo.memoryCalculatePolicy)
        for line in result.explain:
            log.debug("%s", line)
        return result

    def act(self, readings: Readings, decision: BatchDecision, report: CycleReport) -> None:
        """Publish the values in the node status when they moved enough (or it is time), unless another writer
        has taken them over."""
        report.batch, report.batch_reason = decision.values, decision.reason
        now, inputs = readings.now, readings.inputs
        node_name = self.options.node_name
        if not self.on or decision.hold or not self.writes_node(inputs.node):
            return
        colo = inputs.colocation
        current = batchcalc.published(inputs.status.get("allocatable"))
        if node_status_overwritten(self._seen, current, self._written):
            self.coexistence.yield_to_other_writer(
                Capability.BATCH_RESOURCES,
                f"node {node_name} status now has {current or 'none'}, the agent wrote {self._written[-1] or 'none'}")
            return
        self._seen = current
        wanted = decision.wanted
        if not batchcalc.needs_update(current, wanted, self.last_update, now, colo.resourceDiffThreshold,
                                      colo.updateTimeThresholdSeconds, colo.metricReportIntervalSeconds):
            return
        body = batchcalc.status_patch(wanted)
        if self.options.dry_run:
            # The node status never takes a dry run's patch, so every cycle would send it again: said per change.
            if body != self._dry_run_body:
                log.info("dry-run: would patch node %s status with %s", node_name, body)
                self._dry_run_body = body
            self.last_update = now
        elif self.actions is not None and self.actions.patch_node_status(body):
            log.info("published batch resources on %s: %s", node_name, wanted or "removed")
            self.last_update = now
            self._written = [*self._written[-(WRITES_REMEMBERED - 1):], dict(wanted or {})]
