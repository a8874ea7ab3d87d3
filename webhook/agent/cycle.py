"""The node agent's cycle: measure, decide, act (or log, in dry runs), one capability after another.

Everything that decides is pure, in ``webhook.agent.domain`` and the shared ``webhook.core``; each capability
(``webhook.agent.capabilities``, the contract in ``capabilities/contract.py``) decides from the cycle's
``Readings``, keeps its own state across cycles, and acts through the edges it was given (``KubeActions``, the
cgroup files). Only the cycle measures, through the edges (``webhook.agent.edges``), and in two stages: node memory
first, for memory eviction, whose requests a notified cycle makes within milliseconds; then the rest of the node,
for the capabilities in ``Agent.order``. ``Agent.cycle`` returns what they did as a ``CycleReport``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from webhook.agent.capabilities.batch_resources import BatchResources
from webhook.agent.capabilities.cgroup_limits import CgroupLimits
from webhook.agent.capabilities.cgroup_plan import CgroupWrites
from webhook.agent.capabilities.contract import AgentCapability, CgroupReadings, Cpusets, Readings
from webhook.agent.capabilities.cpu_eviction import CpuEviction
from webhook.agent.capabilities.cpu_suppress import CpuSuppress
from webhook.agent.capabilities.memory_eviction import MemoryEviction
from webhook.agent.capabilities.node_condition import NodeCondition
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.sample import Layout, Sample
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.cgroups import CgroupFiles
from webhook.agent.edges.collectors import CollectError, Collector
from webhook.agent.edges.cpusets import CpusetReader
from webhook.agent.inputs import ClusterInputs, Inputs
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport
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
        self.eviction = MemoryEviction(*shared)
        self.limits = CgroupLimits()
        self.suppress = CpuSuppress(options.node_name, self.metrics)
        self.cgroup_writes = CgroupWrites(options, self.coexistence, self.limits, self.suppress,
                                          lambda layout: self._files(layout))
        self.batch = BatchResources(*shared)
        self.condition = NodeCondition(*shared)
        self.cpu_eviction = CpuEviction(*shared)
        # The order of a cycle, the one place that says which capability runs when (as webhook/admission/chain.py
        # orders the rules). Memory eviction comes first, on node memory alone (``cycle``); then these, on the
        # whole node: the cgroup plan of BE limits and suppression, CPU eviction (on the besteffort tier's limit
        # as suppression left it), the batch resources, and the node condition last, on what memory eviction
        # concluded (``Readings.memory_pressure``).
        self.order: tuple[AgentCapability[Any], ...] = (self.cgroup_writes, self.cpu_eviction, self.batch,
                                                        self.condition)
        self._cgroups: CgroupFiles | None = None   # the cgroup files both cgroup capabilities read and write
        self._cpusets = CpusetReader(options.sys_root)
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
        # Node memory and, only when a threshold acts (or memory requests are past the allocatable), the pods'
        # memory are measured (and the Eviction requests made) before the rest of the node, which a notified cycle
        # would otherwise measure on its way to the request.
        memory = self._measured(self.collector.node_memory, "no eviction this cycle")
        readings = Readings(now, inputs, memory)
        if memory is not None and self.eviction.pod_memory_needed(readings):
            be_memory = self.collector.pod_memory(now, self.eviction.pods_to_measure(inputs))
            readings = dataclasses.replace(readings, be_memory=be_memory)
        eviction = self.eviction.decide(readings)
        self.eviction.act(readings, eviction, report)
        sample: Sample | None = None
        if memory is not None:
            # The CPU counters are stamped when they are read: after the requests, which may have taken a while.
            sample = self._measured(lambda: self.collector.collect(self.clock() if at is None else now),
                                    "no cgroup writes and no new usage figures this cycle")
        if sample is not None:
            self._last_collect_error = None
        readings = dataclasses.replace(readings, sample=sample, memory_pressure=eviction.pressure_fact,
                                       cgroups=self._read_cgroups(sample, inputs) if sample is not None else None)
        for capability in self.order:
            capability.act(readings, capability.decide(readings), report)
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

    def _read_cgroups(self, sample: Sample, inputs: Inputs) -> CgroupReadings | None:
        """What the folders of BE limits and BE suppression hold (only what a capability that runs reads)."""
        on = self.coexistence.on
        limits, suppression = on(Capability.BE_CGROUP_LIMITS), on(Capability.CPU_SUPPRESS)
        layout = sample.layout
        if layout is None or not (limits or suppression or self.cpu_eviction.tier_needed(inputs)):
            return None
        files = self._files(layout)
        under, elsewhere = (files.pod_folders([v.obj for v in inputs.pods if v.be], sample.pod_folders, sample.time)
                            if limits else ([], []))
        tier = files.besteffort(sample.time)
        cpusets = None
        if tier is not None and suppression and self.suppress.cpusets_needed(inputs):
            tree, cpus = self._cpusets.read(layout, sample.pod_folders, sample.time, self.suppress.cpusets_anew)
            cpusets = Cpusets(tree, (), cpus) if isinstance(cpus, str) else Cpusets(tree, tuple(cpus))
        return CgroupReadings(layout, files.page_size, files.changed, tuple(under), tuple(elsewhere), tier,
                              files.no_besteffort() if tier is None else None, cpusets)
