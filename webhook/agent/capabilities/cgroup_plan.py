"""The one plan both cgroup capabilities write through: the besteffort tier (CPU suppression) holds the BE pods'
folders (BE limits), and the kernel takes the writes only in an order that spans both
(webhook.agent.domain.cgroup_limits.plan_writes). ``CgroupWrites`` is the step of the cycle for both: each decides
its part (``CgroupLimits``, ``CpuSuppress``), the plan puts them in one order, and ``act`` writes it. A file
another writer changed since the agent wrote it is left to that writer, with its whole capability
(webhook.agent.coexistence)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from webhook.agent.capabilities.cgroup_limits import CgroupLimits
from webhook.agent.capabilities.contract import CgroupWriter, Readings
from webhook.agent.capabilities.cpu_suppress import CpuSuppress, SuppressTarget
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.cgroup_limits import CgroupWrite, Folder, plan_writes
from webhook.agent.domain.coexistence import Capability, rewrites
from webhook.agent.domain.cpuset import CPUSET_FILE
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport, SuppressReport

log = logging.getLogger("colocation-agent")


@dataclass(frozen=True, slots=True)
class CgroupDecision:
    writes: list[CgroupWrite]            # the plan, less the writes of a capability another writer took over
    target: SuppressTarget               # what suppression writes to the tier
    suppressing: bool                    # suppression runs this cycle (it decided, where there is a tier)
    # A capability another writer took over, noticed this cycle, and the write that showed it.
    other_writer: dict[Capability, CgroupWrite] = field(default_factory=dict)


class CgroupPlan:
    def __init__(self, options: AgentOptions, coexistence: Coexistence) -> None:
        self.options = options
        self.coexistence = coexistence
        self._planned = True                     # the last plan had writes (or there was none yet)
        self._applied: dict[tuple[str, str], str] = {}   # (cgroup folder, file) -> the value the agent wrote

    def plan(self, changed: bool, page_size: int, version: int, roots: list[Folder], besteffort: str | None,
             asked: bool, cpusets: Sequence[CgroupWrite] = (),
             cpuset_folders: Collection[str] | None = None) -> tuple[list[CgroupWrite], dict[Capability, CgroupWrite]]:
        """This cycle's writes for ``roots`` (``changed``: what the folders hold moved since the last plan;
        ``asked``: a capability sets a value of its own this cycle), then the ``cpusets`` (cpuset suppression:
        already in the kernel's order, and in files nothing else writes); ``cpuset_folders``: the tier's cpuset
        folders, when read this cycle. With them, the capabilities another writer has taken over this cycle."""
        # Nothing read anew and nothing asked differently: last cycle's empty plan stands.
        anew = changed or asked or self._planned
        writes = plan_writes(version, roots, page_size) if anew else []
        writes, fought = self._not_fighting([*writes, *cpusets], besteffort, roots, cpuset_folders)
        self._planned = bool(writes)
        return writes, fought

    def apply(self, files: CgroupWriter, readings: Readings, writes: Sequence[CgroupWrite]) -> set[tuple[str, str]]:
        """Make the writes (``run``), log them (dry runs), or neither (``once``); the (folder, file) applied."""
        applied: set[tuple[str, str]] = set()
        if writes and self.options.dry_run:
            for w in writes:
                log.info("dry-run: would write %s/%s = %s", w.path, w.file, w.value)
        elif writes and self.options.enforce and readings.cgroups is not None:
            results = files(readings.cgroups.layout).apply(writes)
            applied = {(r.write.path, r.write.file) for r in results if r.applied}
            self._applied.update({(w.path, w.file): w.value for w in writes if (w.path, w.file) in applied})
        return applied

    def _not_fighting(self, writes: list[CgroupWrite], besteffort: str | None, roots: list[Folder],
                      cpuset_folders: Collection[str] | None
                      ) -> tuple[list[CgroupWrite], dict[Capability, CgroupWrite]]:
        """This cycle's writes less those of a capability another writer has taken over (noticed now, or
        before); the values remembered as written shrink to the folders still there."""
        def capability(w: CgroupWrite) -> Capability:
            if w.path == besteffort or w.file == CPUSET_FILE:
                return Capability.CPU_SUPPRESS
            return Capability.BE_CGROUP_LIMITS

        fought: dict[Capability, CgroupWrite] = {}
        for w in rewrites(writes, self._applied):
            cap = capability(w)
            if cap not in self.coexistence.yielded:
                fought.setdefault(cap, w)
        present = set(_folder_paths(roots))
        if cpuset_folders is not None:
            present.update(cpuset_folders)
        self._applied = {k: v for k, v in self._applied.items()
                         if k[0] in present or (k[1] == CPUSET_FILE and cpuset_folders is None)}
        on = self.coexistence.on
        return [w for w in writes if on(cap := capability(w)) and cap not in fought], fought


class CgroupWrites:
    """BE limits and BE suppression: decide each, plan their writes as one, and (in ``run``) make them."""

    names: ClassVar[tuple[Capability, ...]] = (Capability.BE_CGROUP_LIMITS, Capability.CPU_SUPPRESS)

    def __init__(self, options: AgentOptions, coexistence: Coexistence, limits: CgroupLimits,
                 suppress: CpuSuppress, files: CgroupWriter) -> None:
        self.options = options
        self.coexistence = coexistence
        self.limits = limits
        self.suppress = suppress
        self.plan = CgroupPlan(options, coexistence)
        self.files = files

    def decide(self, readings: Readings) -> CgroupDecision | None:
        """None: nothing read (no kubepods tree, or both capabilities off)."""
        cgroups = readings.cgroups
        on = self.coexistence.on
        suppression = on(Capability.CPU_SUPPRESS)
        if cgroups is None or not (suppression or on(Capability.BE_CGROUP_LIMITS)):
            return None    # read for CPU eviction alone
        be = self.limits.decide(readings) if on(Capability.BE_CGROUP_LIMITS) else None
        under, roots = (be.under, be.elsewhere) if be is not None else ([], [])
        tier = cgroups.tier
        target = SuppressTarget()
        if tier is not None:
            if suppression:
                target = self.suppress.decide(readings)
            roots.insert(0, target.tier(tier[0], tier[1], under))
        else:
            roots[:0] = under
        writes, fought = self.plan.plan(cgroups.changed, cgroups.page_size, cgroups.layout.version, roots,
                                        tier[0] if tier else None, target.writes, target.cpusets,
                                        target.cpuset_folders)
        return CgroupDecision(writes, target, suppression, fought)

    def act(self, readings: Readings, decision: CgroupDecision | None, report: CycleReport) -> None:
        if decision is None or readings.cgroups is None:
            return
        for cap, w in decision.other_writer.items():
            self.coexistence.yield_to_other_writer(cap, f"{w.path}/{w.file} no longer holds the {w.value} "
                                                        "the agent wrote")
        writes = decision.writes
        applied = self.plan.apply(self.files, readings, writes)
        report.cgroup_writes = writes
        tier = readings.cgroups.tier
        cfg = readings.inputs.cpu_suppress
        if decision.suppressing and tier is not None:
            self.suppress.record(tier[0], tier[1], decision.target, writes, applied, self.options.dry_run, cfg)
            report.cpu_suppress = self.suppress.report(tier[1], decision.target)
        elif decision.suppressing and cfg.enable:
            # enabled, and nothing to act on: said, as capabilitiesOff says why
            report.cpu_suppress = SuppressReport(cfg.cpuSuppressPolicy, None, None, reason=readings.cgroups.no_tier)


def _folder_paths(folders: Sequence[Folder]) -> Iterator[str]:
    for f in folders:
        yield from (p for p in (f.cpu_path, f.memory_path) if p is not None)
        yield from _folder_paths(f.children)
