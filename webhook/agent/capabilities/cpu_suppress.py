"""BE CPU suppression (``cpu-suppress``): while LS pods need the CPU, the besteffort tier gets what is left
(koordinator's ``pkg/koordlet/qosmanager/plugins/cpusuppress``).

The budget is one formula for every policy (webhook.agent.domain.cpu_suppress); ``cpuSuppressPolicy`` says how
it is enforced. Each policy is an object with ``suppress`` (it is in force) and ``recover`` (it is not, or
suppression is off: undo what it wrote, once), as koordlet recovers the policy not in force. ``cfsQuota`` writes
the tier's CPU quota; ``cpuset`` is not implemented yet: it says so once, and the quota is recovered.

A policy is a ``SuppressPolicy`` in ``CpuSuppress.policies``, keyed by its ``cpuSuppressPolicy`` name; what it
writes is a field of ``SuppressTarget``, which ``SuppressTarget.tier`` puts on the folders to plan, and
``record`` sees how the writes went.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from webhook.agent.collectors import Sample
from webhook.agent.domain import cpu_suppress as suppress
from webhook.agent.domain.cgroup_limits import DEFAULT_CFS_PERIOD, UNLIMITED, CgroupWrite, Current, Folder
from webhook.agent.domain.slo_config import CPUSuppress
from webhook.agent.inputs import Inputs, quantity
from webhook.agent.metrics import AgentMetrics
from webhook.core.quantity import milli_value
from webhook.core.resources import CPU

log = logging.getLogger("colocation-agent")
CPUSET_POLICY = "cpuset"


@dataclass(frozen=True, slots=True)
class SuppressTarget:
    """What the policies write to the besteffort tier this cycle; None leaves a setting as it is."""

    quota: int | None = None      # the CPU quota, µs per period, or UNLIMITED to recover (cfsQuota)

    def merged(self, other: SuppressTarget) -> SuppressTarget:
        return SuppressTarget(quota=other.quota if other.quota is not None else self.quota)

    @property
    def writes(self) -> bool:
        return self.quota is not None

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


class SuppressPolicy(Protocol):
    name: str

    def suppress(self, tier: Current, budget: Callable[[], Budget | None]) -> SuppressTarget:
        """The policy is in force: what to write for ``budget`` (computed only when asked; None without a
        CPU rate yet)."""

    def recover(self, tier: Current) -> SuppressTarget:
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

    def suppress(self, tier: Current, budget: Callable[[], Budget | None]) -> SuppressTarget:
        if tier.quota is None:
            return SuppressTarget()
        self.recovered = False
        given = budget()
        if given is None:
            return SuppressTarget()   # CPU is a rate: the first cycle has none
        period = tier.period or DEFAULT_CFS_PERIOD
        return SuppressTarget(quota=suppress.next_be_quota(suppress.be_quota(given.milli, period), tier.quota,
                                                           suppress.capacity_cores(given.capacity_milli), period))

    def recover(self, tier: Current) -> SuppressTarget:
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


class CpusetNotImplemented:
    """Koordinator's default policy, not implemented yet: said once; nothing of its own to write or undo."""

    name = CPUSET_POLICY

    def __init__(self) -> None:
        self._warned = False

    def suppress(self, tier: Current, budget: Callable[[], Budget | None]) -> SuppressTarget:
        if not self._warned:
            log.info("cpuSuppressPolicy %s is not implemented: BE CPU is not suppressed (cfsQuota is)", self.name)
            self._warned = True
        return SuppressTarget()

    def recover(self, tier: Current) -> SuppressTarget:
        return SuppressTarget()

    def record(self, tier: Current, outcome: Outcome, in_force: bool) -> None:
        pass


class CpuSuppress:
    def __init__(self, node_name: str, metrics: AgentMetrics) -> None:
        self.node_name = node_name
        self.metrics = metrics
        self.policies: dict[str, SuppressPolicy] = {suppress.CFS_QUOTA_POLICY: CfsQuota(node_name, metrics),
                                                    CPUSET_POLICY: CpusetNotImplemented()}

    def in_force(self, cfg: CPUSuppress) -> SuppressPolicy | None:
        """The policy ``cfg`` puts in force; None when suppression is off."""
        return self.policies.get(cfg.cpuSuppressPolicy) if cfg.enable else None

    def decide(self, sample: Sample, inputs: Inputs, tier: Current) -> SuppressTarget:
        """What to write to the besteffort tier: the policy in force suppresses, the others recover."""
        in_force = self.in_force(inputs.cpu_suppress)
        target = SuppressTarget()
        for policy in self.policies.values():
            step = (policy.suppress(tier, lambda: self._budget(sample, inputs)) if policy is in_force
                    else policy.recover(tier))
            target = target.merged(step)
        return target

    def record(self, path: str, tier: Current, target: SuppressTarget, writes: Sequence[CgroupWrite],
               applied: set[tuple[str, str]], dry_run: bool, cfg: CPUSuppress) -> None:
        """After the plan's writes: each policy records what now holds on the tier (``path``)."""
        wrote = any(w.path == path for w in writes)
        done = not wrote or dry_run or all((w.path, w.file) in applied for w in writes if w.path == path)
        in_force = self.in_force(cfg)
        for policy in self.policies.values():
            policy.record(tier, Outcome(target, wrote, done), policy is in_force)

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
