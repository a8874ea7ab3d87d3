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
import weakref
from collections.abc import Iterable
from pathlib import Path

from webhook.agent.domain.sample import Layout, PodUsage, Sample

STAT_SECONDS = 5.0


class CollectError(Exception):
    """The node itself cannot be measured (proc root unreadable or malformed)."""


# -- /proc ------------------------------------------------------------------------------------------
def _read(path: Path) -> bytes:
    """A /proc file whole; CollectError naming it when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CollectError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_meminfo(proc_root: Path) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes."""
    path = proc_root / "meminfo"
    return parse_meminfo(_read(path), path)


def parse_meminfo(text: bytes, path: Path) -> tuple[int, int]:
    found: list[int] = []
    for key in (b"MemTotal", b"MemAvailable"):
        at = text.find(key + b":")
        if at < 0 or (at > 0 and text[at - 1:at] != b"\n"):
            raise CollectError(f"{path}: no {key.decode()} line")
        end = text.find(b"\n", at)
        line = text[at: end if end >= 0 else None]
        parts = line.split()
        try:
            found.append(int(parts[1]) * (1024 if parts[2:3] == [b"kB"] else 1))
        except (ValueError, IndexError):
            shown = line.decode(errors="replace")
            raise CollectError(f"{path}: malformed {key.decode()} line: {shown!r}") from None
    return found[0], found[1]


class ProcFile:
    """A /proc file kept open and read with ``pread``: opening it through ``pathlib`` costs several times the read
    when caches are cold (docs/benchmarks.md), and a notified cycle starts by reading meminfo."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self._fd: int | None = None

    def read(self) -> bytes:
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            text = os.pread(self._fd, self.size, 0)
            if len(text) == self.size:          # more than expected: the whole of it, the slow way
                text = self.path.read_bytes()
        except OSError as exc:
            self.close()
            raise CollectError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        return text

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class MeminfoReader:
    """``meminfo`` kept open: the sampler reads it ten times a second, every cycle reads it."""

    def __init__(self, proc_root: Path) -> None:
        self._file = ProcFile(Path(proc_root) / "meminfo", 8192)

    def read(self) -> tuple[int, int]:
        return parse_meminfo(self._file.read(), self._file.path)

    def close(self) -> None:
        self._file.close()


def read_cpu_ticks(proc_root: Path) -> tuple[int, int, int]:
    """(busy jiffies, total jiffies, number of CPUs) from the aggregate ``cpu`` line."""
    path = proc_root / "stat"
    return parse_cpu_ticks(_read(path), path)


def parse_cpu_ticks(text: bytes, path: Path) -> tuple[int, int, int]:
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


def open_read(path: str, size: int) -> tuple[int | None, bytes | None]:
    """Open ``path`` and read it: (the fd to keep, the content), (None, None) when either fails."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None, None
    try:
        return fd, os.pread(fd, size, 0)
    except OSError:
        os.close(fd)
        return None, None


class PodFiles:
    """One pod's usage files, kept open between cycles and read with ``pread``, and what was read last.

    Opening and closing a cgroup file costs several times its read (docs/benchmarks.md, "Figures behind the code's
    comments"), and the agent reads two or three per pod every cycle. A file whose
    cgroup was removed reads ENODEV: it is reopened once; a pod that left the tree has its files closed.
    """

    __slots__ = ("cpu", "fds", "inactive", "paths", "rel", "sizes")

    def __init__(self, rel: str, usage: str, stat: str, cpu: str | None, cpu_size: int) -> None:
        self.rel = rel
        self.paths = (usage, stat, cpu)
        # A number needs 21 bytes at most; a small read stays in Python's small-object allocator.
        self.sizes = (64, 65536, cpu_size)
        self.fds: list[int | None] = [None, None, None]
        self.inactive: tuple[float, int] | None = None   # (when, inactive_file bytes) from memory.stat
        self.cpu: tuple[float, int] | None = None        # (when, CPU usage µs): the last counter, for the rate

    def read(self, i: int) -> bytes | None:
        """File ``i`` (0 usage, 1 memory.stat, 2 CPU usage), None when it cannot be read."""
        fd = self.fds[i]
        if fd is not None:
            try:
                return os.pread(fd, self.sizes[i], 0)
            except OSError:
                os.close(fd)
                self.fds[i] = None
        path = self.paths[i]
        if path is None:
            return None
        self.fds[i], data = open_read(path, self.sizes[i])
        return data

    def close(self) -> None:
        for i, fd in enumerate(self.fds):
            if fd is not None:
                os.close(fd)
                self.fds[i] = None


def _int(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return int(data)
    except ValueError:
        return None


def _stat_in(data: bytes | None, key: bytes) -> int | None:
    """One ``key value`` line of a flat-keyed cgroup file (memory.stat, cpu.stat)."""
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


# A controller's mount point under the v1 root: separate mounts (cpu, cpuacct) or the combined one.
_V1_CPUACCT = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
_V1_CPU = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def detect_layout(root: Path) -> Layout | None:
    """Which cgroup version and driver this node uses, or None when there is no kubepods tree."""
    r = str(root)
    if os.path.exists(os.path.join(r, "cgroup.controllers")):
        for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
            base = os.path.join(r, name)
            if os.path.isdir(base):
                return Layout(2, driver, base, base, r, base)
        return None
    for name, driver in (("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")):
        mem = os.path.join(r, "memory", name)
        if os.path.isdir(mem):
            acct = next((p for p in (os.path.join(r, c, name) for c in _V1_CPUACCT) if os.path.isdir(p)), "")
            ctl = next((p for p in (os.path.join(r, c, name) for c in _V1_CPU) if os.path.isdir(p)), "")
            return Layout(1, driver, mem, acct, r, ctl)
    return None


def pod_dirs(base: str, driver: str) -> dict[str, str]:
    """uid -> the pod's directory relative to ``base`` (Guaranteed pods sit directly under it)."""
    qos = (("kubepods-burstable.slice", "kubepods-besteffort.slice") if driver == "systemd"
           else ("burstable", "besteffort"))
    out: dict[str, str] = {}
    match = _POD_DIR.match
    for rel in ("", *qos):
        try:
            names = os.listdir(base + os.sep + rel if rel else base)
        except OSError:
            continue
        prefix = rel + os.sep if rel else ""
        for name in names:
            m = match(name)
            if m is not None:
                sd = m.group("sd")
                out[sd.replace("_", "-") if sd else m.group("fs")] = prefix + name
    return out


class Collector:
    """Takes samples; remembers each pod's open files and previous CPU counters (to turn them into rates)."""

    def __init__(self, proc_root: Path, cgroup_root: Path, stat_seconds: float = STAT_SECONDS) -> None:
        self.proc_root = Path(proc_root)
        self.cgroup_root = Path(cgroup_root)
        self._prev_node: tuple[int, int] | None = None
        # memory.stat is the costly read (a cgroup v1 kernel sums it over the hierarchy);
        # the page cache it yields moves slowly, so each pod's is read again every ``stat_seconds`` only.
        self.stat_seconds = stat_seconds
        self._pods: dict[str, PodFiles] = {}     # uid -> the pod's files, for the pods of the last scan
        self._meminfo = MeminfoReader(self.proc_root)
        self._stat = ProcFile(self.proc_root / "stat", 65536)
        # A collector dropped (tests, ``once``) closes what it holds open.
        weakref.finalize(self, _close_all, self._pods, self._meminfo, self._stat)

    def check(self) -> None:
        """Fail early (CollectError) when the proc root cannot be read."""
        read_meminfo(self.proc_root)
        read_cpu_ticks(self.proc_root)

    def node_memory(self) -> tuple[int, int]:
        """(MemTotal, MemAvailable) now: all a memory threshold needs to know whether it is met."""
        return self._meminfo.read()

    def collect(self, now: float) -> Sample:
        total, available = self._meminfo.read()
        busy, ticks, cpus = parse_cpu_ticks(self._stat.read(), self._stat.path)
        node_cpu = None
        if self._prev_node is not None and ticks > self._prev_node[1]:
            node_cpu = (busy - self._prev_node[0]) / (ticks - self._prev_node[1]) * cpus * 1000
        self._prev_node = (busy, ticks)
        layout = detect_layout(self.cgroup_root)
        dirs = pod_dirs(layout.memory_base, layout.driver) if layout is not None else {}
        pods = self._usage(layout, dirs, now) if layout is not None else {}
        return Sample(now, total, available, cpus, node_cpu, pods, layout, dirs)

    def pod_memory(self, now: float, uids: Iterable[str]) -> dict[str, int | None]:
        """The working set of the pods ``uids`` now (None: no cgroup, or unreadable), without their CPU."""
        layout = detect_layout(self.cgroup_root)
        if layout is None:
            return {}
        dirs = pod_dirs(layout.memory_base, layout.driver)
        out: dict[str, int | None] = {}
        for uid in uids:
            rel = dirs.get(uid)
            out[uid] = self._memory(self._files(layout, uid, rel), layout.version, now) if rel is not None else None
        return out

    def _files(self, layout: Layout, uid: str, rel: str) -> PodFiles:
        files = self._pods.get(uid)
        if files is None or files.rel != rel:
            if files is not None:
                files.close()
            mem = layout.memory_base + os.sep + rel
            if layout.version == 2:
                files = PodFiles(rel, mem + "/memory.current", mem + "/memory.stat", mem + "/cpu.stat", 4096)
            else:
                # The kubelet names a pod's folder alike in every controller: no second scan for cpuacct.
                acct = layout.cpu_base + os.sep + rel + "/cpuacct.usage" if layout.cpu_base else None
                files = PodFiles(rel, mem + "/memory.usage_in_bytes", mem + "/memory.stat", acct, 64)
            self._pods[uid] = files
        return files

    def _memory(self, files: PodFiles, version: int, now: float) -> int | None:
        """Working set: usage − inactive_file (``memory.stat`` read again every ``stat_seconds``)."""
        usage = _int(files.read(0))
        last = files.inactive
        if last is None or now - last[0] >= self.stat_seconds:
            inactive = _stat_in(files.read(1), b"inactive_file" if version == 2 else b"total_inactive_file")
            files.inactive = last = (now, inactive) if inactive is not None else None
        if usage is None or last is None:
            return None
        return max(usage - last[1], 0)

    def _usage(self, layout: Layout, dirs: dict[str, str], now: float) -> dict[str, PodUsage]:
        out: dict[str, PodUsage] = {}
        v2 = layout.version == 2
        known = self._pods
        for uid in [u for u in known if u not in dirs]:      # pods that left: their files closed
            known.pop(uid).close()
        for uid, rel in dirs.items():
            files = known.get(uid)
            if files is None or files.rel != rel:
                files = self._files(layout, uid, rel)
            memory = self._memory(files, layout.version, now)
            data = files.read(2)
            if v2:
                cpu_usec = _stat_in(data, b"usage_usec")
            else:
                ns = _int(data)
                cpu_usec = ns // 1000 if ns is not None else None
            cpu = None
            if cpu_usec is not None:
                before = files.cpu
                if before is not None and now > before[0] and cpu_usec >= before[1]:
                    cpu = (cpu_usec - before[1]) / ((now - before[0]) * 1000)
                files.cpu = (now, cpu_usec)
            else:
                files.cpu = None
            out[uid] = PodUsage(cpu, memory)
        return out

    def close(self) -> None:
        _close_all(self._pods, self._meminfo, self._stat)


def _close_all(pods: dict[str, PodFiles], *proc: MeminfoReader | ProcFile) -> None:
    for files in pods.values():
        files.close()
    pods.clear()
    for file in proc:
        file.close()
