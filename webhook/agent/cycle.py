"""The node agent's cycle: measure, decide, act (or log, in dry runs), one capability after another.

Everything that decides is pure, in ``webhook.agent.domain`` and the shared ``webhook.core``; each capability
(``webhook.agent.capabilities``) wires what was measured into those functions, keeps its own state across
cycles, and acts through ``KubeActions`` or the cgroup files. ``Agent.cycle`` returns what it did as a
``CycleReport``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from webhook.agent.capabilities.batch_resources import BatchResources
from webhook.agent.capabilities.cgroup_limits import CgroupLimits
from webhook.agent.capabilities.cgroup_plan import CgroupPlan
from webhook.agent.capabilities.cpu_suppress import CpuSuppress, SuppressTarget
from webhook.agent.capabilities.memory_eviction import MemoryEviction
from webhook.agent.capabilities.node_condition import NodeCondition
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.cgroup_limits import CgroupWrite, Folder
from webhook.agent.domain.coexistence import Capability
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.cgroups import CgroupFiles
from webhook.agent.edges.collectors import CollectError, Collector, Layout, Sample
from webhook.agent.inputs import ClusterInputs, Inputs
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport, SuppressReport
from webhook.cluster.state import ClusterState

log = logging.getLogger("colocation-agent")
T = TypeVar("T")


class Agent:
    """One node's agent. ``cycle()`` returns the report whose ``as_dict()`` ``once`` prints."""

    def __init__(self, options: AgentOptions, collector: Collector, state: ClusterState | None = None,
                 actions: KubeActions | None = None, metrics: AgentMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.node_name = options.node_name
        self.collector = collector
        self.state = state
        self.actions = actions
        self.metrics = metrics or AgentMetrics()
        self.clock = clock
        self.coexistence = Coexistence(options.disabled, self.metrics)
        self.inputs = ClusterInputs(options, state, actions, self.metrics)
        shared = (options, self.coexistence, actions, self.metrics)
        self.eviction = MemoryEviction(*shared, collector)
        self.limits = CgroupLimits()
        self.suppress = CpuSuppress(options.node_name, self.metrics, options.sys_root)
        self.cgroup_plan = CgroupPlan(options, self.coexistence)
        self.batch = BatchResources(*shared)
        self.condition = NodeCondition(*shared)
        self._cgroups: CgroupFiles | None = None   # the cgroup files both cgroup capabilities read and write
        self._last_collect_error: str | None = None

    @property
    def yielded(self) -> dict[Capability, str]:
        """The capabilities left to another writer, and what was seen of it."""
        return self.coexistence.yielded

    def cycle(self, now: float | None = None) -> CycleReport:
        started = time.perf_counter()
        at = now
        now = self.clock() if now is None else now
        inputs = self.inputs.read()
        report = CycleReport(self.node_name, config_error=inputs.config_error,
                             config_warnings=[str(n) for n in inputs.config_notices if not n.koordinator],
                             config_notices=[str(n) for n in inputs.config_notices if n.koordinator])
        self.eviction.begin_cycle()
        if self.actions is not None:
            self.actions.begin_cycle()
        # The eviction decision needs node memory and, only when a threshold acts, the BE pods' memory: both are
        # measured (and the Eviction requests made) before the rest of the node, which a notified cycle would
        # otherwise measure on its way to the request.
        pressure, observed = False, list[str]()
        sample: Sample | None = None
        memory = self._measured(self.collector.node_memory, "no eviction this cycle")
        if memory is not None:
            decision = self.eviction.decide(now, memory, inputs)
            report.memory, report.release_target_bytes = decision.memory, decision.release_target
            report.evictions = self.eviction.act(now, decision)
            pressure, observed = decision.pressure, decision.first_observed
            # The CPU counters are stamped when they are read: after the requests, which may have taken a while.
            sample = self._measured(lambda: self.collector.collect(self.clock() if at is None else now),
                                    "no cgroup writes and no new usage figures this cycle")
        if sample is not None:
            self._last_collect_error = None
            report.cgroup_writes, report.cpu_suppress = self._cgroup_writes(sample, inputs)
        batch = self.batch.decide(now, sample, inputs)
        self.batch.act(now, inputs, batch)
        report.batch, report.batch_reason = batch.values, batch.reason
        condition = self.condition.decide(pressure, observed)
        self.condition.act(inputs.node, condition)
        report.conditions = [condition]
        report.capabilities_off = self.coexistence.off()
        if self.actions is not None:
            self.actions.flush_events()   # repeats folded into a series, once the node's own work is done
        self.metrics.cycle.observe(time.perf_counter() - started)
        return report

    def _measured(self, measure: Callable[[], T], consequence: str) -> T | None:
        try:
            return measure()
        except CollectError as exc:
            if str(exc) != self._last_collect_error:
                log.error("cannot measure the node, %s: %s", consequence, exc)
                self._last_collect_error = str(exc)
            return None

    def _files(self, layout: Layout) -> CgroupFiles:
        if self._cgroups is None or self._cgroups.layout != layout:
            if self._cgroups is not None:
                self._cgroups.close()
            self._cgroups = CgroupFiles(layout, self.metrics)
        return self._cgroups

    def _cgroup_writes(self, sample: Sample, inputs: Inputs) -> tuple[list[CgroupWrite], SuppressReport | None]:
        """BE limits and BE suppression: decide each, plan their writes as one, and (in ``run``) make them."""
        on = self.coexistence.on
        limits, suppression = on(Capability.BE_CGROUP_LIMITS), on(Capability.CPU_SUPPRESS)
        if sample.layout is None or not (limits or suppression):
            return [], None
        files = self._files(sample.layout)
        under: list[Folder] = []
        roots: list[Folder] = []
        if limits:
            under, roots = self.limits.folders(files, sample, inputs)
        tier = files.besteffort(sample.time)
        target = SuppressTarget()
        if tier is not None:
            if suppression:
                target = self.suppress.decide(sample, inputs, tier[1])
            roots.insert(0, target.tier(tier[0], tier[1], under))
        else:
            roots[:0] = under
        writes = self.cgroup_plan.plan(files, sample.layout.version, roots, tier[0] if tier else None,
                                       target.writes, target.cpusets, target.cpuset_folders)
        applied = self.cgroup_plan.apply(files, writes)
        if tier is not None and suppression:
            self.suppress.record(tier[0], tier[1], target, writes, applied, self.options.dry_run,
                                 inputs.cpu_suppress)
            return writes, self.suppress.report(tier[1], target)
        cfg = inputs.cpu_suppress
        if suppression and cfg.enable:   # enabled, and nothing to act on: said, as capabilitiesOff says why
            return writes, SuppressReport(cfg.cpuSuppressPolicy, None, None, reason=files.no_besteffort())
        return writes, None
