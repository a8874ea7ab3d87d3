"""Temporary /proc and cgroup trees laid out like real nodes (cgroup v1/v2, systemd/cgroupfs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FakePod:
    uid: str
    qos: str = "besteffort"        # guaranteed | burstable | besteffort
    current: int = 0               # memory.current / memory.usage_in_bytes
    inactive_file: int = 0
    usage_usec: int = 0


def write_proc(root: Path, mem_total: int, mem_available: int, busy: int = 1000, idle: int = 9000,
               cpus: int = 2) -> Path:
    """``meminfo`` and ``stat`` as the kernel prints them (kB, jiffies)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "meminfo").write_text(
        f"MemTotal:       {mem_total // 1024:>8} kB\n"
        f"MemFree:        {mem_available // 2048:>8} kB\n"
        f"MemAvailable:   {mem_available // 1024:>8} kB\n"
        "Buffers:            1024 kB\nCached:           204800 kB\nSwapCached:            0 kB\n")
    per = [f"cpu{i} {busy // cpus} 0 0 {idle // cpus} 0 0 0 0 0 0" for i in range(cpus)]
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n" + "\n".join(per) +
                               "\nintr 1 2 3\nctxt 100\nbtime 1700000000\nprocesses 10\n")
    return root


def _memory_stat_v2(inactive: int) -> str:
    return (f"anon 1048576\nfile 4194304\nkernel 262144\nkernel_stack 16384\nsock 0\nshmem 0\n"
            f"file_mapped 0\nfile_dirty 0\nactive_anon 1048576\ninactive_anon 0\nactive_file 1024\n"
            f"inactive_file {inactive}\nunevictable 0\npgfault 10\n")


def _memory_stat_v1(inactive: int) -> str:
    return (f"cache 4194304\nrss 1048576\ninactive_anon 0\nactive_anon 1048576\ninactive_file {inactive}\n"
            f"active_file 1024\nunevictable 0\nhierarchical_memory_limit 9223372036854771712\n"
            f"total_cache 4194304\ntotal_rss 1048576\ntotal_inactive_anon 0\ntotal_active_anon 1048576\n"
            f"total_inactive_file {inactive}\ntotal_active_file 1024\ntotal_unevictable 0\n")


def _pod_rel(pod: FakePod, driver: str) -> str:
    if driver == "systemd":
        u = pod.uid.replace("-", "_")
        if pod.qos == "guaranteed":
            return f"kubepods.slice/kubepods-pod{u}.slice"
        return f"kubepods.slice/kubepods-{pod.qos}.slice/kubepods-{pod.qos}-pod{u}.slice"
    if pod.qos == "guaranteed":
        return f"kubepods/pod{pod.uid}"
    return f"kubepods/{pod.qos}/pod{pod.uid}"


def write_cgroup_v2(root: Path, pods: list[FakePod], driver: str = "systemd") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    base = root / ("kubepods.slice" if driver == "systemd" else "kubepods")
    base.mkdir(exist_ok=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for pod in pods:
        d = root / _pod_rel(pod, driver)
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.current").write_text(f"{pod.current}\n")
        (d / "memory.stat").write_text(_memory_stat_v2(pod.inactive_file))
        (d / "cpu.stat").write_text(f"usage_usec {pod.usage_usec}\nuser_usec {pod.usage_usec // 2}\n"
                                    f"system_usec {pod.usage_usec // 2}\nnr_periods 0\n")
        scope = d / ("cri-containerd-0123abcd.scope" if driver == "systemd" else "0123abcd")
        scope.mkdir(exist_ok=True)
        (scope / "memory.current").write_text(f"{pod.current}\n")
    return root


def write_cgroup_v1(root: Path, pods: list[FakePod], driver: str = "systemd") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for ctl in ("memory", "cpu,cpuacct", "cpuset"):
        (root / ctl).mkdir(exist_ok=True)
    for link in ("cpu", "cpuacct"):
        if not (root / link).exists():
            os.symlink("cpu,cpuacct", root / link)
    for pod in pods:
        rel = _pod_rel(pod, driver)
        mem = root / "memory" / rel
        mem.mkdir(parents=True, exist_ok=True)
        (mem / "memory.usage_in_bytes").write_text(f"{pod.current}\n")
        (mem / "memory.stat").write_text(_memory_stat_v1(pod.inactive_file))
        cpu = root / "cpu,cpuacct" / rel
        cpu.mkdir(parents=True, exist_ok=True)
        (cpu / "cpuacct.usage").write_text(f"{pod.usage_usec * 1000}\n")
    return root


def set_pod_cpu_v2(root: Path, pod: FakePod, usage_usec: int, driver: str = "systemd") -> None:
    pod.usage_usec = usage_usec
    (root / _pod_rel(pod, driver) / "cpu.stat").write_text(f"usage_usec {usage_usec}\n")


def pod_dir_v2(root: Path, pod: FakePod, driver: str = "systemd") -> Path:
    return root / _pod_rel(pod, driver)
