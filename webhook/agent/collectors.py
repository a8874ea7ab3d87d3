"""Measuring: node memory and CPU from ``<proc-root>``, per-pod usage from the pod cgroups.

cgroup v2 (``memory.current`` − ``inactive_file``, ``cpu.stat`` usage_usec) and v1
(``memory.usage_in_bytes`` − ``total_inactive_file``, ``cpuacct.usage``), under the systemd
(``kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice``) or cgroupfs
(``kubepods/besteffort/pod<uid>``) layout, detected on every scan, never configured.
A pod whose cgroup is missing or unreadable has no usage (None), which is not zero.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path


class CollectError(Exception):
    """The node itself cannot be measured (proc root unreadable or malformed)."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    cpu_milli: float | None       # None until two samples exist, or when unreadable
    memory: int | None            # working set bytes


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    mem_total: int
    mem_available: int
    num_cpus: int
    node_cpu_milli: float | None
    pods: dict[str, PodUsage] = field(default_factory=dict)
    cgroup_layout: str = "none"

    @property
    def mem_used(self) -> int:
        return max(self.mem_total - self.mem_available, 0)


# -- /proc ------------------------------------------------------------------------------------------
def read_meminfo(proc_root: Path) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes."""
    path = proc_root / "meminfo"
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise CollectError(f"{path}: cannot read: {exc.strerror or exc}") from None
    found: dict[bytes, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable"):
            parts = rest.split()
            try:
                found[key] = int(parts[0]) * (1024 if parts[1:2] == [b"kB"] else 1)
            except (ValueError, IndexError):
                shown = line.decode(errors="replace")
                raise CollectError(f"{path}: malformed {key.decode()} line: {shown!r}") from None
    for key in (b"MemTotal", b"MemAvailable"):
        if key not in found:
            raise CollectError(f"{path}: no {key.decode()} line")
    return found[b"MemTotal"], found[b"MemAvailable"]


def read_cpu_ticks(proc_root: Path) -> tuple[int, int, int]:
    """(busy jiffies, total jiffies, number of CPUs) from the aggregate ``cpu`` line."""
    path = proc_root / "stat"
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise CollectError(f"{path}: cannot read: {exc.strerror or exc}") from None
    busy = total = cpus = 0
    seen = False
    for line in text.splitlines():
        if line.startswith(b"cpu "):
            try:
                v = [int(x) for x in line.split()[1:9]]
            except ValueError:
                raise CollectError(f"{path}: malformed cpu line") from None
            v += [0] * (8 - len(v))
            user, nice, system, idle, iowait, irq, softirq, steal = v
            busy = user + nice + system + irq + softirq + steal
            total = busy + idle + iowait
            seen = True
        elif line.startswith(b"cpu"):
            cpus += 1
    if not seen:
        raise CollectError(f"{path}: no aggregate cpu line")
    return busy, total, max(cpus, 1)


# -- cgroups ----------------------------------------------------------------------------------------
_POD_DIR = re.compile(r"^(?:kubepods-(?:burstable-|besteffort-)?pod(?P<sd>[0-9a-fA-F_-]+)\.slice"
                      r"|pod(?P<fs>[0-9a-fA-F-]+))$")


def _read(path: str) -> bytes | None:
    # os.open/os.read: no buffered file object per read; cgroup files are small (one read).
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_int(path: str) -> int | None:
    data = _read(path)
    if data is None:
        return None
    try:
        return int(data)
    except ValueError:
        return None


def _stat_value(path: str, key: bytes) -> int | None:
    """One ``key value`` line of a flat-keyed cgroup file (memory.stat, cpu.stat)."""
    data = _read(path)
    if data is None:
        return None
    at = data.find(b"\n" + key + b" ")
    if at >= 0:
        at += 1
    elif data.startswith(key + b" "):
        at = 0
    else:
        return None
    end = data.find(b"\n", at)
    try:
        return int(data[at + len(key) + 1: end if end >= 0 else None])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Layout:
    version: int            # 1 or 2
    driver: str             # "systemd" or "cgroupfs"
    memory_base: str        # the kubepods directory holding memory files
    cpu_base: str           # the kubepods directory holding cpu accounting

    @property
    def name(self) -> str:
        return f"v{self.version}/{self.driver}"


def detect_layout(root: Path) -> Layout | None:
    """Which cgroup version and driver this node uses, or None when there is no kubepods tree."""
    r = str(root)
    if os.path.exists(os.path.join(r, "cgroup.controllers")):
        for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
            base = os.path.join(r, name)
            if os.path.isdir(base):
                return Layout(2, driver, base, base)
        return None
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        mem = os.path.join(r, "memory", name)
        if os.path.isdir(mem):
            for cpu_ctl in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                cpu = os.path.join(r, cpu_ctl, name)
                if os.path.isdir(cpu):
                    return Layout(1, driver, mem, cpu)
            return Layout(1, driver, mem, "")
    return None


def pod_dirs(base: str, driver: str) -> dict[str, str]:
    """uid -> the pod's directory relative to ``base`` (Guaranteed pods sit directly under it)."""
    qos = (("kubepods-burstable.slice", "kubepods-besteffort.slice") if driver == "systemd"
           else ("burstable", "besteffort"))
    out: dict[str, str] = {}
    for rel in ("", *qos):
        try:
            entries = os.scandir(os.path.join(base, rel) if rel else base)
        except OSError:
            continue
        with entries:
            for e in entries:
                m = _POD_DIR.match(e.name)
                if m is None:
                    continue
                uid = m.group("sd").replace("_", "-") if m.group("sd") else m.group("fs")
                out[uid] = os.path.join(rel, e.name) if rel else e.name
    return out


class Collector:
    """Takes samples; remembers the previous CPU counters to turn them into rates."""

    def __init__(self, proc_root: Path, cgroup_root: Path) -> None:
        self.proc_root = Path(proc_root)
        self.cgroup_root = Path(cgroup_root)
        self._prev_node: tuple[int, int] | None = None
        self._prev_pods: dict[str, tuple[float, int]] = {}

    def check(self) -> None:
        """Fail early (CollectError) when the proc root cannot be read."""
        read_meminfo(self.proc_root)
        read_cpu_ticks(self.proc_root)

    def collect(self, now: float) -> Sample:
        total, available = read_meminfo(self.proc_root)
        busy, ticks, cpus = read_cpu_ticks(self.proc_root)
        node_cpu = None
        if self._prev_node is not None and ticks > self._prev_node[1]:
            node_cpu = (busy - self._prev_node[0]) / (ticks - self._prev_node[1]) * cpus * 1000
        self._prev_node = (busy, ticks)
        layout = detect_layout(self.cgroup_root)
        pods = self._pods(layout, now) if layout is not None else {}
        return Sample(now, total, available, cpus, node_cpu, pods, layout.name if layout else "none")

    def _pods(self, layout: Layout, now: float) -> dict[str, PodUsage]:
        out: dict[str, PodUsage] = {}
        prev = self._prev_pods
        fresh: dict[str, tuple[float, int]] = {}
        v2 = layout.version == 2
        cpu_dirs = pod_dirs(layout.cpu_base, layout.driver) if (layout.cpu_base and not v2) else None
        for uid, rel in pod_dirs(layout.memory_base, layout.driver).items():
            d = os.path.join(layout.memory_base, rel)
            if v2:
                usage = _read_int(d + "/memory.current")
                inactive = _stat_value(d + "/memory.stat", b"inactive_file")
                cpu_usec = _stat_value(d + "/cpu.stat", b"usage_usec")
            else:
                usage = _read_int(d + "/memory.usage_in_bytes")
                inactive = _stat_value(d + "/memory.stat", b"total_inactive_file")
                cpu_rel = cpu_dirs.get(uid) if cpu_dirs is not None else None
                ns = _read_int(os.path.join(layout.cpu_base, cpu_rel, "cpuacct.usage")) if cpu_rel else None
                cpu_usec = ns // 1000 if ns is not None else None
            memory = max(usage - inactive, 0) if usage is not None and inactive is not None else None
            cpu = None
            if cpu_usec is not None:
                fresh[uid] = (now, cpu_usec)
                before = prev.get(uid)
                if before is not None and now > before[0] and cpu_usec >= before[1]:
                    cpu = (cpu_usec - before[1]) / ((now - before[0]) * 1000)
            out[uid] = PodUsage(cpu, memory)
        self._prev_pods = fresh
        return out
