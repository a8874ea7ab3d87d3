"""The one plan both cgroup capabilities write through: the besteffort tier (CPU suppression) holds the BE pods'
folders (BE limits), and the kernel takes the writes only in an order that spans both
(webhook.agent.domain.cgroup_limits.plan_writes). A file another writer changed since the agent wrote it is
left to that writer, with its whole capability (webhook.agent.coexistence)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence

from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.cgroup_limits import CgroupWrite, Folder, plan_writes
from webhook.agent.domain.coexistence import Capability, rewrites
from webhook.agent.domain.cpuset import CPUSET_FILE
from webhook.agent.edges.cgroups import CgroupFiles
from webhook.agent.options import AgentOptions

log = logging.getLogger("colocation-agent")


class CgroupPlan:
    def __init__(self, options: AgentOptions, coexistence: Coexistence) -> None:
        self.options = options
        self.coexistence = coexistence
        self._planned = True                     # the last plan had writes (or there was none yet)
        self._applied: dict[tuple[str, str], str] = {}   # (cgroup folder, file) -> the value the agent wrote

    def plan(self, files: CgroupFiles, version: int, roots: list[Folder], besteffort: str | None,
             asked: bool, cpusets: Sequence[CgroupWrite] = (),
             cpuset_folders: Collection[str] | None = None) -> list[CgroupWrite]:
        """This cycle's writes for ``roots`` (``asked``: a capability sets a value of its own this cycle), then
        the ``cpusets`` (cpuset suppression: already in the kernel's order, and in files nothing else writes);
        ``cpuset_folders``: the tier's cpuset folders, when read this cycle."""
        # Nothing read anew and nothing asked differently: last cycle's empty plan stands.
        anew = files.changed or asked or self._planned
        writes = plan_writes(version, roots, files.page_size) if anew else []
        writes = self._not_fighting([*writes, *cpusets], besteffort, roots, cpuset_folders)
        self._planned = bool(writes)
        return writes

    def apply(self, files: CgroupFiles, writes: Sequence[CgroupWrite]) -> set[tuple[str, str]]:
        """Make the writes (``run``), log them (dry runs), or neither (``once``); the (folder, file) applied."""
        applied: set[tuple[str, str]] = set()
        if writes and self.options.dry_run:
            for w in writes:
                log.info("dry-run: would write %s/%s = %s", w.path, w.file, w.value)
        elif writes and self.options.enforce:
            applied = {(r.write.path, r.write.file) for r in files.apply(writes) if r.applied}
            self._applied.update({(w.path, w.file): w.value for w in writes if (w.path, w.file) in applied})
        return applied

    def _not_fighting(self, writes: list[CgroupWrite], besteffort: str | None,
                      roots: list[Folder], cpuset_folders: Collection[str] | None) -> list[CgroupWrite]:
        """This cycle's writes less those of a capability another writer has taken over (noticed now, or
        before); the values remembered as written shrink to the folders still there."""
        def capability(w: CgroupWrite) -> Capability:
            if w.path == besteffort or w.file == CPUSET_FILE:
                return Capability.CPU_SUPPRESS
            return Capability.BE_CGROUP_LIMITS

        for w in rewrites(writes, self._applied):
            cap = capability(w)
            if cap not in self.coexistence.yielded:
                self.coexistence.yield_to_other_writer(cap, f"{w.path}/{w.file} no longer holds the {w.value} "
                                                            "the agent wrote")
        present = set(_folder_paths(roots))
        if cpuset_folders is not None:
            present.update(cpuset_folders)
        self._applied = {k: v for k, v in self._applied.items()
                         if k[0] in present or (k[1] == CPUSET_FILE and cpuset_folders is None)}
        return [w for w in writes if self.coexistence.on(capability(w))]


def _folder_paths(folders: Sequence[Folder]) -> Iterator[str]:
    for f in folders:
        yield from (p for p in (f.cpu_path, f.memory_path) if p is not None)
        yield from _folder_paths(f.children)
