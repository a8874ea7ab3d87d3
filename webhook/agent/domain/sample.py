"""What the collectors measure of the node, as plain data: node memory and CPU, each pod's usage, and the cgroup
layout (version, driver, folders). The collectors (``webhook.agent.edges.collectors``) make these; the capabilities
read them from the cycle's ``Readings`` (``webhook.agent.capabilities.contract``) without importing an edge."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import NamedTuple


class PodUsage(NamedTuple):
    """A tuple: the usage window takes a sample's pods as they are."""

    cpu_milli: float | None       # None until two samples exist, or when unreadable
    memory: int | None            # working set bytes


@dataclass(frozen=True, slots=True)
class Sample:
    """One collection of the node (``Collector.collect``): its memory and CPU, and each pod's usage, at ``time``."""

    time: float
    mem_total: int
    mem_available: int
    num_cpus: int
    node_cpu_milli: float | None
    pods: dict[str, PodUsage] = field(default_factory=dict)
    layout: Layout | None = None
    pod_folders: dict[str, str] = field(default_factory=dict)  # uid -> folder relative to the kubepods folder

    @property
    def mem_used(self) -> int:
        return used_memory(self.mem_total, self.mem_available)


def used_memory(total: int, available: int) -> int:
    """Node memory in use, the measure of every memory threshold: MemTotal − MemAvailable, never below 0."""
    return max(total - available, 0)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the kubepods cgroup tree is, and how it is laid out (``detect_layout``, on every scan)."""

    version: int            # 1 or 2
    driver: str             # "systemd" or "cgroupfs"
    memory_base: str        # the kubepods directory holding memory files
    cpu_base: str           # the kubepods directory holding cpu accounting (v1: cpuacct)
    root: str = ""          # the cgroup root (--cgroup-root)
    cpu_ctl_base: str = ""  # the kubepods directory of the cpu controller (v1: cpu; v2: the same folder)

    @property
    def name(self) -> str:
        return f"v{self.version}/{self.driver}"

    def rel(self, path: str) -> str:
        """``path`` relative to the cgroup root, as ``cgroupWrites`` name folders."""
        return posixpath.relpath(path, self.root) if self.root else path
