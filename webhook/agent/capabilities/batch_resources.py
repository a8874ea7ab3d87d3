"""Batch resources (``batch-resources``): batch-cpu and batch-memory, and mid-cpu and mid-memory, computed from the
node's measured usage over the colocation window (webhook.agent.domain.batch_allocatable and mid_allocatable) and
published in the node status in one patch, as koord-manager's noderesource controller does with its batch and mid
plugins (one writer of the node's extended resources: docs/agent.md, "Mid resources")."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from webhook.agent.capabilities.contract import Readings
from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain import batch_allocatable as batchcalc
from webhook.agent.domain import mid_allocatable as midcalc
from webhook.agent.domain.coexistence import Capability, node_status_overwritten
from webhook.agent.domain.cpu_suppress import node_reserved
from webhook.agent.domain.sample import Sample
from webhook.agent.domain.slo_config import label_overrides
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import UNITS, AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport
from webhook.core.quantity import int_value, milli_value
from webhook.core.resources import BATCH_RESOURCES, CPU, MEMORY, MID_RESOURCES

if TYPE_CHECKING:
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")
WRITES_REMEMBERED = 3   # the agent's own node-status writes a late watch may still show


@dataclass(frozen=True, slots=True)
class BatchDecision:
    values: dict[str, int]          # what the report shows, batch and mid ({} when the capability is off)
    wanted: dict[str, int] | None   # what the node status should hold (None: withdrawn)
    reason: str | None              # why a batch value is 0, held, or raised above the formula
    hold: bool = False              # leave the node's values as they are (nothing new measured)
    mid_reason: str | None = None   # the same of the mid values


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
        self._ignored: tuple[str, ...] = ()         # the node's ratio labels last logged as ignored

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
            shown = {name: current.get(name, 0) for name in batchcalc.PUBLISHED}
            self._gauges(shown)
            held = f"{why}: the node's values are left as they are"
            return BatchDecision(shown, None, held, hold=True, mid_reason=held)
        self._held = None
        computed = self._compute(sample, inputs) if why is None else None
        mid = self._compute_mid(sample, inputs) if why is None else None
        floor = batchcalc.admitted(((v.batch_cpu_request, v.batch_memory_request, v.mid_cpu_request,
                                     v.mid_memory_request) for v in inputs.pods if not v.finished),
                                   batchcalc.PUBLISHED)
        # Withdrawn (colocation off, usage data too old) is 0 but for what bound pods request: they stay admitted.
        formula = dict.fromkeys(batchcalc.PUBLISHED, 0)
        if computed is not None and mid is not None:
            formula = {**computed.resources(), **mid.resources()}
        result, raised = batchcalc.with_floor(formula, floor)
        # Withdrawn, a tier is kept while its bound pods request it and removed once none does.
        wanted: dict[str, int] | None = result if computed is not None else {
            name: result[name] for tier in (BATCH_RESOURCES, MID_RESOURCES) if any(result[n] for n in tier)
            for name in tier} or None
        if why is not None and colo.enable and why != self._withdrawn:
            log.warning("%s: withdrawing batch resources%s", why,
                        "" if wanted is None else " but for what the pods bound to the node request")
        self._withdrawn = why
        names = frozenset(line.split(" ", 1)[0] for line in raised)
        if names != self._raised:       # said when it starts or stops, not every cycle
            for line in raised:
                log.info("batch resources: %s", line)
            self._raised = names
        missing = self.options.node_name if inputs.node is None else None
        zero = batchcalc.zero_reason(why, computed, missing)
        mid_zero = batchcalc.zero_reason(why, mid, missing)
        ignored = label_overrides(self._labels(inputs))[1]
        reason = "; ".join([*([zero] if zero else []), *(r for r in raised if r.split(" ", 1)[0] in BATCH_RESOURCES)])
        mid_reason = "; ".join([*([mid_zero] if mid_zero else []), *ignored,
                                *(r for r in raised if r.split(" ", 1)[0] in MID_RESOURCES)])
        if ignored != self._ignored:
            for line in ignored:
                log.warning("mid resources: %s", line)
            self._ignored = ignored
        self._gauges(result)
        return BatchDecision(result, wanted, reason or None, mid_reason=mid_reason or None)

    @staticmethod
    def _labels(inputs: Inputs) -> dict[str, str]:
        return dict(((inputs.node or {}).get("metadata") or {}).get("labels") or {})

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

    def _compute_mid(self, sample: Sample | None, inputs: Inputs) -> midcalc.MidResult:
        """Mid allocatable from the window's averages (webhook.agent.domain.mid_allocatable): the node's capacity
        and allocatable (this machine's without a node object, as for batch), what it reserves, and its pods."""
        status = inputs.status
        cap, alloc = status.get("capacity") or {}, status.get("allocatable") or {}

        def pair(values: dict[str, object], fallback: tuple[int, int]) -> tuple[int, int]:
            cpu_q, mem_q = quantity(values.get(CPU)), quantity(values.get(MEMORY))
            return (milli_value(cpu_q) if cpu_q is not None else fallback[0],
                    int_value(mem_q) if mem_q is not None else fallback[1])
        machine = (sample.num_cpus * 1000, sample.mem_total) if sample else (0, 0)
        allocatable = pair(alloc, machine)
        capacity = pair(cap, allocatable)
        node_cpu, node_mem = self.window.average("")
        used = None if node_cpu is None or node_mem is None else (node_cpu, node_mem)
        average = self.window.average
        pods = [midcalc.MidPod(v.priority_class, v.running_or_pending, v.cpu_request_milli, v.memory_request,
                               *average(v.uid))
                for v in inputs.pods if not v.finished]
        node = midcalc.Node(capacity, allocatable, node_reserved(inputs.node), used)
        result = midcalc.mid_from_usage(inputs.colocation, node, pods)
        for line in result.explain:
            log.debug("%s", line)
        return result

    def act(self, readings: Readings, decision: BatchDecision, report: CycleReport) -> None:
        """Publish the values in the node status when they moved enough (or it is time), unless another writer
        has taken them over."""
        values = decision.values
        report.batch = {k: v for k, v in values.items() if k in BATCH_RESOURCES}
        report.mid = {k: v for k, v in values.items() if k in MID_RESOURCES}
        report.batch_reason, report.mid_reason = decision.reason, decision.mid_reason
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
        body = batchcalc.status_patch(wanted, current)
        if self.options.dry_run:
            # The node status never takes a dry run's patch, so every cycle would send it again: said per change.
            if body != self._dry_run_body:
                log.info("dry-run: would patch node %s status with %s", node_name, body)
                self._dry_run_body = body
            self.last_update = now
        elif self.actions is not None and self.actions.patch_node_status(body):
            log.info("published batch and mid resources on %s: %s", node_name, wanted or "removed")
            self.last_update = now
            self._written = [*self._written[-(WRITES_REMEMBERED - 1):], dict(wanted or {})]
