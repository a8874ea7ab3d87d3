"""The besteffort tier's folders in the cpuset hierarchy, and what their ``cpuset.cpus`` hold.

As koordlet's ``GetBECPUSetPathsByMaxDepth(ContainerCgroupPathRelativeDepth)`` (``pkg/koordlet/util/node.go``):
the tier, every folder in it (pods) and every folder in those (containers, sandboxes), in a directory walk's order
(each folder before the folders in it, names in ascending order) - every BE pod sits in the tier.

- cgroup v1: the ``cpuset`` controller's mount, ``<cgroup-root>/cpuset/kubepods[.slice]/<tier>``;
- cgroup v2: the tier in the unified tree, when the ``cpuset`` controller is enabled for it (its
  ``cgroup.controllers`` lists cpuset, i.e. ``kubepods``' ``cgroup.subtree_control`` has it). A pod or container
  folder without ``cpuset.cpus`` (the tier does not pass the controller down) is confined by the tier's anyway: a
  v2 folder may use only CPUs its parent's ``cpuset.cpus.effective`` holds. Without the controller for the tier,
  the cpuset policy cannot act (``CpusetTree.unavailable`` says why); koordlet then fails to read the tier's
  ``cpuset.cpus`` every cycle and suppresses nothing; the agent's capability falls back to ``cfsQuota``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from webhook.agent.domain.cgroup_limits import BESTEFFORT_FOLDER
from webhook.agent.domain.cpuset import (
    CPUSET_FILE,
    CpuListError,
    CpusetFolder,
    CpusetTree,
    ProcessorInfo,
    parse_cpu_list,
)
from webhook.agent.domain.sample import Layout
from webhook.agent.edges.cgroups import VERIFY_SECONDS
from webhook.agent.edges.topology import SYS_ROOT, TopologyError, TopologyReader

EFFECTIVE_FILE = "cpuset.cpus.effective"
MAX_DEPTH = 2                     # koordlet ContainerCgroupPathRelativeDepth: tier 0, pods 1, containers 2


def tier_path(layout: Layout) -> str:
    """The besteffort tier's folder in the cpuset hierarchy (absolute)."""
    kubepods = os.path.basename(layout.memory_base)
    tier = BESTEFFORT_FOLDER[layout.driver]
    if layout.version == 1:
        return os.path.join(layout.root, "cpuset", kubepods, tier)
    return os.path.join(layout.cpu_ctl_base or layout.memory_base, tier)


def _controllers(folder: str) -> str | None:
    try:
        with open(os.path.join(folder, "cgroup.controllers")) as f:
            return f.read()
    except OSError:
        return None


def unavailable_reason(layout: Layout, tier: str) -> str | None:
    rel = layout.rel(tier)
    if layout.version == 1:
        mount = os.path.join(layout.root, "cpuset")
        if not os.path.isdir(mount):
            return f"cgroup v1: no cpuset controller mounted at {mount}"
        if not os.path.isdir(tier):
            return f"cgroup v1: no besteffort folder {rel} in the cpuset hierarchy"
        return None
    if not os.path.isdir(tier):
        return f"cgroup v2: no besteffort folder {rel}"
    controllers = _controllers(tier)
    if controllers is None or "cpuset" not in controllers.split():
        parent = layout.rel(os.path.dirname(tier))
        return (f"cgroup v2: the cpuset controller is not enabled for {rel} ({rel}/cgroup.controllers has no "
                f"cpuset: {parent}/cgroup.subtree_control lacks it)")
    return None


def _cpus(folder: str, name: str, layout: Layout, problems: list[str],
          known: dict[bytes, frozenset[int]]) -> frozenset[int] | None:
    """The CPUs a folder's file lists; ``known``: lists already parsed this walk (most folders hold the same)."""
    path = folder + os.sep + name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{layout.rel(path)}: cannot read: {exc.strerror or exc}")
        return None
    try:
        data = os.read(fd, 65536)
    except OSError as exc:
        problems.append(f"{layout.rel(path)}: cannot read: {exc.strerror or exc}")
        return None
    finally:
        os.close(fd)
    cpus = known.get(data)
    if cpus is None:
        try:
            cpus = known[data] = parse_cpu_list(data.decode(errors="replace"), layout.rel(path))
        except CpuListError as exc:
            problems.append(str(exc))
            return None
    return cpus


def _walk(folder: str, depth: int, out: list[str], layout: Layout, problems: list[str]) -> list[str]:
    out.append(folder)
    if depth < MAX_DEPTH:
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            names = []                   # removed meanwhile: its pod left
        except OSError as exc:           # said: a folder below it left as it is may refuse the tier's narrowing
            problems.append(f"{layout.rel(folder)}: cannot list: {exc.strerror or exc}")
            names = []
        for name in names:
            _walk(folder + os.sep + name, depth + 1, out, layout, problems)
    return out


def read_tree(layout: Layout) -> CpusetTree:
    """The tier's folders (to ``MAX_DEPTH``) and their CPUs, or why the cpuset policy cannot act."""
    tier = tier_path(layout)
    why = unavailable_reason(layout, tier)
    if why is not None:
        return CpusetTree(unavailable=why)
    problems: list[str] = []
    known: dict[bytes, frozenset[int]] = {}
    rel = layout.rel(tier)
    start = len(tier)
    folders = tuple(CpusetFolder(rel + p[start:], _cpus(p, CPUSET_FILE, layout, problems, known))
                    for p in _walk(tier, 0, [], layout, problems))
    held = folders[0].cpus
    if held is None:
        return CpusetTree(unavailable=f"{folders[0].path}/{CPUSET_FILE} cannot be read", problems=tuple(problems))
    if not held and layout.version == 2:     # empty on v2: the parent's CPUs, as the kernel's effective list says
        held = _cpus(tier, EFFECTIVE_FILE, layout, problems, known) or frozenset()
    return CpusetTree(folders, held, None, tuple(problems))


class CpusetReader:
    """The tier's cpuset folders and the CPU topology, for the cpuset policy (``webhook.agent.capabilities.
    cpu_suppress``).

    The tree is read again when BE pods come or go, after the agent wrote to it (``anew``), while the policy cannot
    act, and at least every VERIFY_SECONDS (as the BE pods' other cgroup files): a walk reads every folder. A
    container that starts meanwhile holds its pod's CPUs (the runtime copies them; cgroup v2: empty, the parent's).
    """

    def __init__(self, sys_root: Path = SYS_ROOT) -> None:
        self.topology = TopologyReader(sys_root)
        self.tree = CpusetTree()
        self._read: tuple[Layout, frozenset[str], float] | None = None

    def read(self, layout: Layout, pod_folders: Mapping[str, str], now: float,
             anew: bool = False) -> tuple[CpusetTree, list[ProcessorInfo] | str]:
        """The tree, and the online CPUs or why the topology cannot be read (not read while the tree is
        unavailable)."""
        prefix = BESTEFFORT_FOLDER[layout.driver] + "/"
        pods = frozenset(rel for rel in pod_folders.values() if rel.startswith(prefix))
        last = self._read
        if (anew or last is None or last[0] != layout or last[1] != pods or now - last[2] >= VERIFY_SECONDS
                or self.tree.unavailable is not None):
            self.tree = read_tree(layout)
            self._read = (layout, pods, now)
        if self.tree.unavailable is not None:
            return self.tree, []
        try:
            return self.tree, self.topology.read()
        except TopologyError as exc:
            return self.tree, f"cannot read the CPU topology: {exc}"
