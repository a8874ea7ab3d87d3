"""BE CPU suppression (``cpu-suppress``): while LS pods need the CPU, the besteffort tier gets what is left
(koordinator's ``pkg/koordlet/qosmanager/plugins/cpusuppress``).

The budget is one formula for every policy (webhook.agent.domain.cpu_suppress); ``cpuSuppressPolicy`` says how
it is enforced. Each policy is an object with ``suppress`` (it is in force) and ``recover`` (it is not, or
suppression is off: undo what it wrote, once), as koordlet recovers the policy not in force. ``cfsQuota`` writes
the tier's CPU quota; ``cpuset`` the ``cpuset.cpus`` of the tier and every BE pod and container folder in it
(webhook.agent.domain.cpuset). Where the cpuset policy cannot act (cgroup v2 without the cpuset controller for the
tier, no cpuset hierarchy, no readable topology) ``cfsQuota`` is in force instead, said once.

A policy is a ``SuppressPolicy`` in ``CpuSuppress.policies``, keyed by its ``cpuSuppressPolicy`` name; what it
writes is a field of ``SuppressTarget``: the quota goes on the tier's folder to plan (``SuppressTarget.tier``),
the cpusets are planned already (``SuppressTarget.cpusets``); ``record`` sees how the writes went. The tier's
cpuset folders and the topology are read by the cycle (``webhook.agent.edges.cpusets.CpusetReader``) when
``cpusets_needed`` says the policies read them this cycle.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from webhook.agent.capabilities.contract import Cpusets, Readings
from webhook.agent.domain import cpu_suppress as suppress
from webhook.agent.domain.cgroup_limits import (
    DEFAULT_CFS_PERIOD,
    UNLIMITED,
    CgroupWrite,
    Current,
    Folder,
)
from webhook.agent.domain.cpuset import (
    CPUSET_POLICY,
    CpusetTree,
    Pools,
    ProcessorInfo,
    choose,
    format_cpu_list,
    plan_cpuset_writes,
    pools,
)
from webhook.agent.domain.sample import Sample
from webhook.agent.domain.slo_config import CPUSuppress
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import AgentMetrics
from webhook.agent.report import SuppressReport
from webhook.core.quantity import milli_value
from webhook.core.resources import CPU

log = logging.getLogger("colocation-agent")


@dataclass(frozen=True, slots=True)
class SuppressTarget:
    """What the policies write to the besteffort tier this cycle; None leaves a setting as it is."""

    quota: int | None = None      # the CPU quota, µs per period, or UNLIMITED to recover (cfsQuota)
    cpusets: tuple[CgroupWrite, ...] = ()      # cpuset.cpus of the tier's folders, in the kernel's order (cpuset)
    cpus: frozenset[int] | None = None         # the CPUs those writes leave BE pods
    cpuset_folders: frozenset[str] | None = None   # the tier's cpuset folders, when read this cycle

    def merged(self, other: SuppressTarget) -> SuppressTarget:
        return SuppressTarget(quota=other.quota if other.quota is not None else self.quota,
                              cpusets=other.cpusets or self.cpusets,
                              cpus=other.cpus if other.cpus is not None else self.cpus,
                              cpuset_folders=other.cpuset_folders if other.cpuset_folders is not None
                              else self.cpuset_folders)

    @property
    def writes(self) -> bool:
        return self.quota is not None or bool(self.cpusets)

    def tier(self, path: str, current: Current, children: Sequence[Folder]) -> Folder:
        """The besteffort tier's folder to plan, BE pods' folders under it."""
        return Folder(path, None, current, quota=self.quota, children=tuple(children))


@dataclass(frozen=True, slots=True)
class Budget:
    milli: int                    # what BE pods may use, milli-cores
    capacity_milli: int           # the node's CPU


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the tier's writes of a cycle went, for the policies to record."""

    target: SuppressTarget
    wrote: bool                   # the plan wrote to the tier
    done: bool                    # nothing to write, a dry run, or every write to the tier applied
    cpusets_done: bool = True     # every cpuset write applied (or a dry run)


@dataclass(frozen=True, slots=True)
class Node:
    """What a policy may read of this cycle besides the tier's quota."""

    sample: Sample
    inputs: Inputs
    cpusets: Cpusets | None = None   # the tier's cpuset folders and the topology, when read this cycle


class SuppressPolicy(Protocol):
    name: str

    def suppress(self, tier: Current, budget: Callable[[], Budget | None], node: Node) -> SuppressTarget:
        """The policy is in force: what to write for ``budget`` (computed only when asked; None without a
        CPU rate yet)."""

    def recover(self, tier: Current, node: Node) -> SuppressTarget:
        """The policy is not in force: what to write to undo it (nothing once undone)."""

    def record(self, tier: Current, outcome: Outcome, in_force: bool) -> None:
        """After the writes: remember what now holds, and export it."""


class CfsQuota:
    """The besteffort tier's CPU quota (koordlet ``adjustByCfsQuota``)."""

    name = suppress.CFS_QUOTA_POLICY

    def __init__(self, node_name: str, metrics: AgentMetrics) -> None:
        self.node_name = node_name
        self.metrics = metrics
        self.recovered = False       # koordlet recovers the besteffort quota once when not suppressing

    def suppress(self, tier: Current, budget: Callable[[], Budget | None], node: Node) -> SuppressTarget:
        if tier.quota is None:
            return SuppressTarget()
        self.recovered = False
        given = budget()
        if given is None:
            return SuppressTarget()   # CPU is a rate: the first cycle has none
        period = tier.period or DEFAULT_CFS_PERIOD
        # None (a move within the band) leaves the tier as it is, and with it, on cgroup v1, the BE folders
        # clamped under it: plan_writes fits them to the quota the tier holds, which they already fit.
        return SuppressTarget(quota=suppress.next_be_quota(suppress.be_quota(given.milli, period), tier.quota,
                                                           suppress.capacity_cores(given.capacity_milli), period))

    def recover(self, tier: Current, node: Node) -> SuppressTarget:
        if tier.quota is None:
            return SuppressTarget()
        if self.recovered or tier.quota == UNLIMITED:
            self.recovered = True
            return SuppressTarget()
        return SuppressTarget(quota=UNLIMITED)

    def record(self, tier: Current, outcome: Outcome, in_force: bool) -> None:
        quota = outcome.target.quota
        now_in_force = quota if (quota is not None and outcome.wrote and outcome.done) else tier.quota
        if quota == UNLIMITED and outcome.done:
            self.recovered = True
        if in_force and now_in_force is not None:
            cores = -1.0 if now_in_force == UNLIMITED else now_in_force / (tier.period or DEFAULT_CFS_PERIOD)
            self.metrics.suppress_cores.labels(self.node_name, self.name).set(cores)


class Cpuset:
    """BE pods' CPUs (koordlet ``adjustByCPUSet``, ``applyCPUSetWithNonePolicy``, ``recoverCPUSetIfNeed``)."""

    name = CPUSET_POLICY

    def __init__(self, node_name: str, metrics: AgentMetrics) -> None:
        self.node_name = node_name
        self.metrics = metrics
        self.recovered = False        # every CPU BE may use is back (koordlet writes it every cycle; once holds)
        self.tree = CpusetTree()      # the tier's cpuset folders, as last read
        self.held: frozenset[int] | None = None   # the CPUs BE pods may use, as last read or written
        self.processors: list[ProcessorInfo] = []  # the node's online CPUs, as read this cycle
        self.stale = False            # the agent wrote to the tree: the next cycle reads it anew
        self._problems: set[str] = set()

    def unavailable(self, node: Node) -> str | None:
        """Why the policy cannot act on the tier's cpuset folders and the topology as read, None when it can."""
        read = node.cpusets
        if read is None:
            return "no kubepods cgroup tree"
        self.tree, self.stale = read.tree, False
        if self.tree.unavailable is not None:
            return self.tree.unavailable
        self.held = self.tree.held
        if read.topology_error is not None:
            return read.topology_error
        self.processors = list(read.processors)
        return None

    def _pools(self, node: Node) -> Pools:
        pool = pools(self.processors, [v.obj for v in node.inputs.pods], node.inputs.node)
        for problem in {*pool.problems, *self.tree.problems} - self._problems:
            log.warning("cpuset suppression: %s (left out)", problem)   # said once each
        self._problems = {*pool.problems, *self.tree.problems}
        return pool

    def suppress(self, tier: Current, budget: Callable[[], Budget | None], node: Node) -> SuppressTarget:
        """Called after ``unavailable`` said None this cycle."""
        self.recovered = False
        given = budget()
        if given is None:
            return SuppressTarget()   # CPU is a rate: the first cycle has none
        choice = choose(given.milli, self.tree.held, len(self.processors), self._pools(node))
        log.debug("%s", choice.explain)
        writes = plan_cpuset_writes(self.tree.folders, choice.cpus, self.tree.held)
        return SuppressTarget(cpusets=tuple(writes), cpus=choice.cpus, cpuset_folders=self._folders())

    def _folders(self) -> frozenset[str]:
        return frozenset(f.path for f in self.tree.folders)

    def recover(self, tier: Current, node: Node) -> SuppressTarget:
        if self.recovered or self.unavailable(node) is not None:
            return SuppressTarget()
        allowed = self._pools(node).allowed
        writes = plan_cpuset_writes(self.tree.folders, allowed, self.tree.held)
        self.recovered = not writes
        return SuppressTarget(cpusets=tuple(writes), cpus=allowed if writes else None,
                              cpuset_folders=self._folders())

    def record(self, tier: Current, outcome: Outcome, in_force: bool) -> None:
        target = outcome.target
        if target.cpusets:
            self.stale = True             # read what the kernel made of the writes next cycle
            if outcome.cpusets_done and target.cpus is not None:
                self.held = target.cpus
                if not in_force:
                    self.recovered = True
        if in_force and self.held is not None:
            self.metrics.suppress_cores.labels(self.node_name, self.name).set(len(self.held))


class CpuSuppress:
    def __init__(self, node_name: str, metrics: AgentMetrics) -> None:
        self.node_name = node_name
        self.metrics = metrics
        self.cfs_quota = CfsQuota(node_name, metrics)
        self.cpuset = Cpuset(node_name, metrics)
        self.policies: dict[str, SuppressPolicy] = {suppress.CFS_QUOTA_POLICY: self.cfs_quota,
                                                    CPUSET_POLICY: self.cpuset}
        self.fallback: str | None = None       # why cfsQuota stands in for the cpuset policy this cycle
        self._in_force: SuppressPolicy | None = None
        self._said: str | None = None          # the fallback's reason, as last logged

    def in_force(self, cfg: CPUSuppress, node: Node) -> SuppressPolicy | None:
        """The policy ``cfg`` puts in force (None when suppression is off): cfsQuota where cpuset cannot act."""
        self.fallback = None
        policy = self.policies.get(cfg.cpuSuppressPolicy) if cfg.enable else None
        if policy is self.cpuset:
            self.fallback = self.cpuset.unavailable(node)
            if self.fallback is not None:
                policy = self.cfs_quota
        if self.fallback != self._said:
            if self.fallback is not None:
                log.warning("cpuSuppressPolicy cpuset cannot act: %s; suppressing BE CPU with cfsQuota instead "
                            "(docs/agent.md, BE CPU suppression)", self.fallback)
            elif policy is self.cpuset:
                log.info("cpuSuppressPolicy cpuset can act again: BE CPU is suppressed with cpuset")
            self._said = self.fallback
        return policy

    def cpusets_needed(self, inputs: Inputs) -> bool:
        """Whether this cycle's policies read the tier's cpuset folders and the topology: the cpuset policy is
        enabled, or has not recovered yet (pure: the config and what the policy remembers)."""
        cfg = inputs.cpu_suppress
        return (cfg.enable and cfg.cpuSuppressPolicy == CPUSET_POLICY) or not self.cpuset.recovered

    @property
    def cpusets_anew(self) -> bool:
        """The agent wrote to the tier's cpuset folders last cycle: they are read anew."""
        return self.cpuset.stale

    def decide(self, readings: Readings) -> SuppressTarget:
        """What to write to the besteffort tier: the policy in force suppresses, the others recover. Called with
        the sample and the tier read."""
        cgroups, sample, inputs = readings.cgroups, readings.sample, readings.inputs
        assert cgroups is not None and cgroups.tier is not None and sample is not None
        tier = cgroups.tier[1]
        node = Node(sample, inputs, cgroups.cpusets)
        in_force = self._in_force = self.in_force(inputs.cpu_suppress, node)
        target = SuppressTarget()
        for policy in self.policies.values():
            step = (policy.suppress(tier, lambda: self._budget(sample, inputs), node) if policy is in_force
                    else policy.recover(tier, node))
            target = target.merged(step)
        return target

    def record(self, path: str, tier: Current, target: SuppressTarget, writes: Sequence[CgroupWrite],
               applied: set[tuple[str, str]], dry_run: bool, cfg: CPUSuppress) -> None:
        """After the plan's writes: each policy records what now holds on the tier (``path``)."""
        wrote = any(w.path == path for w in writes)
        done = not wrote or dry_run or all((w.path, w.file) in applied for w in writes if w.path == path)
        planned = {(w.path, w.file) for w in writes}
        cpusets_done = dry_run or all((w.path, w.file) in applied and (w.path, w.file) in planned
                                      for w in target.cpusets)
        outcome = Outcome(target, wrote, done, cpusets_done)
        for policy in self.policies.values():
            policy.record(tier, outcome, policy is self._in_force)
            if policy is not self._in_force:    # the metric names the policy in force only
                with contextlib.suppress(KeyError):
                    self.metrics.suppress_cores.remove(self.node_name, policy.name)

    def report(self, tier: Current | None, target: SuppressTarget) -> SuppressReport:
        """The policy in force and what BE pods may use under it."""
        policy = self._in_force
        cpus = target.cpus if target.cpus is not None else self.cpuset.held
        cores: float | None = None
        if policy is self.cpuset and cpus is not None:
            cores = float(len(cpus))
        elif policy is self.cfs_quota and tier is not None and tier.quota is not None:
            quota = target.quota if target.quota is not None else tier.quota
            cores = None if quota == UNLIMITED else quota / (tier.period or DEFAULT_CFS_PERIOD)
        return SuppressReport(policy.name if policy is not None else None,
                              format_cpu_list(cpus) if cpus is not None else None, cores, self.fallback)

    def _budget(self, sample: Sample, inputs: Inputs) -> Budget | None:
        """What BE pods may use now (webhook.agent.domain.cpu_suppress); None before a CPU rate is measured."""
        if sample.node_cpu_milli is None:
            return None
        cfg = inputs.cpu_suppress
        cap_q = quantity((inputs.status.get("capacity") or {}).get(CPU))
        capacity = milli_value(cap_q) if cap_q is not None and cap_q > 0 else sample.num_cpus * 1000
        be_uids = {v.uid for v in inputs.pods if v.besteffort}
        used = [(uid in be_uids, p.cpu_milli) for uid, p in sample.pods.items() if p.cpu_milli is not None]
        result = suppress.suppress_milli(capacity, cfg.cpuSuppressThresholdPercent, cfg.cpuSuppressMinPercent,
                                         sample.node_cpu_milli, used, suppress.node_reserved_milli(inputs.node))
        log.debug("%s", result.explain)
        self.metrics.suppress_ls_used.labels(self.node_name).set(result.non_be_milli / 1000)
        return Budget(result.milli, capacity)
