"""The node's CPU topology from sysfs: each online CPU's core, socket and NUMA node.

koordlet takes the same facts from ``lscpu -e=CPU,NODE,SOCKET,CORE,CACHE,ONLINE``
(``pkg/koordlet/util/cpuinfo.go`` ``GetLocalCPUInfo``), which reads them from these files:

- ``devices/system/cpu/online``: the online CPUs (an offline CPU has no topology and cannot run anything);
- ``devices/system/cpu/cpuN/topology/core_id`` and ``physical_package_id``: its core and socket;
- ``devices/system/node/nodeM/cpulist``: the CPUs of NUMA node M (no ``node`` folder: one node, 0, as lscpu shows).

A file that cannot be read or holds no number is an error naming the file: a wrong topology would confine BE pods
to CPUs that do not exist.
"""

from __future__ import annotations

import os
from pathlib import Path

from webhook.agent.domain.cpuset import CpuListError, ProcessorInfo, parse_cpu_list

SYS_ROOT = Path("/sys")


class TopologyError(Exception):
    """The CPU topology cannot be read from sysfs."""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _number(path: Path) -> int:
    text = _read(path).strip()
    try:
        return int(text)
    except ValueError:
        raise TopologyError(f"{path}: {text!r} is not a number") from None


def _cpus(path: Path) -> frozenset[int]:
    try:
        return parse_cpu_list(_read(path), str(path))
    except CpuListError as exc:
        raise TopologyError(str(exc)) from None


def read_processors(sys_root: Path = SYS_ROOT) -> list[ProcessorInfo]:
    """Every online CPU, ordered by NUMA node, socket, core and CPU (as koordlet orders ``lscpu``'s lines)."""
    cpu_dir = sys_root / "devices" / "system" / "cpu"
    online = _cpus(cpu_dir / "online")
    if not online:
        raise TopologyError(f"{cpu_dir / 'online'}: no CPU is online")
    node_of: dict[int, int] = {}
    node_dir = sys_root / "devices" / "system" / "node"
    try:
        names = os.listdir(node_dir)
    except FileNotFoundError:
        names = []                      # a kernel without NUMA: one node
    except OSError as exc:              # unreadable is not "no NUMA": the nodes would be wrong
        raise TopologyError(f"{node_dir}: cannot read: {exc.strerror or exc}") from None
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            for cpu in _cpus(node_dir / name / "cpulist"):
                node_of[cpu] = int(name[4:])
    out = []
    for cpu in sorted(online):
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        out.append(ProcessorInfo(cpu, _number(topo / "core_id"), _number(topo / "physical_package_id"),
                                 node_of.get(cpu, 0)))
    return sorted(out, key=lambda p: (p.node, p.socket, p.core, p.cpu))


class TopologyReader:
    """The topology, read again only when the online CPUs change (hot-plug): one small read per cycle."""

    def __init__(self, sys_root: Path = SYS_ROOT) -> None:
        self.sys_root = Path(sys_root)
        self._online: str | None = None
        self._processors: list[ProcessorInfo] = []

    def read(self) -> list[ProcessorInfo]:
        online = _read(self.sys_root / "devices" / "system" / "cpu" / "online")
        if online != self._online:
            self._processors = read_processors(self.sys_root)
            self._online = online
        return self._processors
