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
    container_ids: tuple[str, ...] = ()   # "containerd://<id>": container folders named as the runtime names them


UNLIMITED_V1_MEMORY = "9223372036854771712"


def _container_leaf(container_id: str, driver: str) -> str:
    runtime, _, cid = container_id.partition("://")
    if driver == "systemd":
        return {"containerd": f"cri-containerd-{cid}.scope", "docker": f"docker-{cid}.scope",
                "cri-o": f"crio-{cid}.scope"}[runtime]
    return f"crio-{cid}" if runtime == "cri-o" else cid


def _limit_files_v2(d: Path, kubelet_weight: str = "1") -> None:
    """What the kubelet leaves in a BestEffort pod's (or the besteffort QoS) folder: no limits, weight 1."""
    (d / "cpu.max").write_text("max 100000\n")
    (d / "cpu.weight").write_text(f"{kubelet_weight}\n")
    (d / "memory.max").write_text("max\n")


def _limit_files_v1(cpu: Path, mem: Path | None) -> None:
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (cpu / "cpu.shares").write_text("2\n")
    if mem is not None:
        (mem / "memory.limit_in_bytes").write_text(UNLIMITED_V1_MEMORY + "\n")


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


def tick_cpu(root: Path, busy: int = 100, idle: int = 100) -> None:
    """Time passing on the machine of ``write_proc``: ``busy`` and ``idle`` jiffies more in ``stat``, spread over its
    CPUs, the rest of the file as it was (a CPU rate needs two different readings)."""
    path = root / "stat"
    lines = path.read_text().splitlines()
    cpus = sum(1 for line in lines if line.startswith("cpu") and not line.startswith("cpu "))
    out = []
    for line in lines:
        if line.startswith("cpu"):
            name, *fields = line.split()
            share = 1 if name == "cpu" else cpus
            values = [int(v) for v in fields]
            values[0] += busy // share
            values[3] += idle // share
            line = f"{name}{'  ' if name == 'cpu' else ' '}{' '.join(str(v) for v in values)}"
        out.append(line)
    # In place and in one write, never truncated first: the agent reads this file at any moment (and keeps it open,
    # as it keeps /proc/stat), and an empty file between the truncation and the write is "no aggregate cpu line".
    with path.open("r+b") as f:
        f.write(("\n".join(out) + "\n").encode())
        f.truncate()


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


def _be_qos_rel(driver: str) -> str:
    return "kubepods.slice/kubepods-besteffort.slice" if driver == "systemd" else "kubepods/besteffort"


def write_cgroup_v2(root: Path, pods: list[FakePod], driver: str = "systemd") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    base = root / ("kubepods.slice" if driver == "systemd" else "kubepods")
    base.mkdir(exist_ok=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    be = root / _be_qos_rel(driver)
    be.mkdir(exist_ok=True)
    _limit_files_v2(be)
    for pod in pods:
        d = root / _pod_rel(pod, driver)
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.current").write_text(f"{pod.current}\n")
        (d / "memory.stat").write_text(_memory_stat_v2(pod.inactive_file))
        (d / "cpu.stat").write_text(f"usage_usec {pod.usage_usec}\nuser_usec {pod.usage_usec // 2}\n"
                                    f"system_usec {pod.usage_usec // 2}\nnr_periods 0\n")
        _limit_files_v2(d)
        leaves = [_container_leaf(c, driver) for c in pod.container_ids] or \
            ["cri-containerd-0123abcd.scope" if driver == "systemd" else "0123abcd"]
        for leaf in leaves:
            scope = d / leaf
            scope.mkdir(exist_ok=True)
            (scope / "memory.current").write_text(f"{pod.current}\n")
            _limit_files_v2(scope)
    return root


def write_cgroup_v1(root: Path, pods: list[FakePod], driver: str = "systemd", separate_cpu: bool = False) -> Path:
    """A v1 tree: cpu and cpuacct combined (``cpu,cpuacct`` with the usual symlinks) or mounted separately."""
    root.mkdir(parents=True, exist_ok=True)
    cpu_ctl, acct_ctl = ("cpu", "cpuacct") if separate_cpu else ("cpu,cpuacct", "cpu,cpuacct")
    for ctl in ("memory", cpu_ctl, acct_ctl, "cpuset"):
        (root / ctl).mkdir(exist_ok=True)
    if not separate_cpu:
        for link in ("cpu", "cpuacct"):
            if not (root / link).exists():
                os.symlink("cpu,cpuacct", root / link)
    be = root / cpu_ctl / _be_qos_rel(driver)
    be.mkdir(parents=True, exist_ok=True)
    _limit_files_v1(be, None)
    for pod in pods:
        rel = _pod_rel(pod, driver)
        mem = root / "memory" / rel
        mem.mkdir(parents=True, exist_ok=True)
        (mem / "memory.usage_in_bytes").write_text(f"{pod.current}\n")
        (mem / "memory.stat").write_text(_memory_stat_v1(pod.inactive_file))
        acct = root / acct_ctl / rel
        acct.mkdir(parents=True, exist_ok=True)
        (acct / "cpuacct.usage").write_text(f"{pod.usage_usec * 1000}\n")
        cpu = root / cpu_ctl / rel
        cpu.mkdir(parents=True, exist_ok=True)
        _limit_files_v1(cpu, mem)
        for leaf in (_container_leaf(c, driver) for c in pod.container_ids):
            (cpu / leaf).mkdir(exist_ok=True)
            (mem / leaf).mkdir(exist_ok=True)
            _limit_files_v1(cpu / leaf, mem / leaf)
    return root


def set_pod_cpu_v2(root: Path, pod: FakePod, usage_usec: int, driver: str = "systemd") -> None:
    pod.usage_usec = usage_usec
    (root / _pod_rel(pod, driver) / "cpu.stat").write_text(f"usage_usec {usage_usec}\n")


def pod_dir_v2(root: Path, pod: FakePod, driver: str = "systemd") -> Path:
    return root / _pod_rel(pod, driver)


# -- cpuset (BE CPU suppression, cpuset policy) ------------------------------------------------------------------
def _cpuset_folders(tier: Path, pods: list[FakePod], driver: str) -> list[Path]:
    """The tier, then each BE pod's folder and its container folders, as the kubelet and the runtime make them."""
    out = [tier]
    be = sorted(((Path(_pod_rel(pod, driver)).name, pod) for pod in pods if pod.qos == "besteffort"),
                key=lambda named: named[0])
    for name, pod in be:                         # in a directory walk's order: names ascending
        d = tier / name
        out.append(d)
        leaves = [_container_leaf(c, driver) for c in pod.container_ids] or \
            ["cri-containerd-0123abcd.scope" if driver == "systemd" else "0123abcd"]
        out += [d / leaf for leaf in sorted(leaves)]
    return out


def write_cpuset_v1(root: Path, pods: list[FakePod], driver: str = "systemd", cpus: str = "0-7") -> list[Path]:
    """The cpuset controller's besteffort tree of a v1 node (next to ``write_cgroup_v1``'s): every folder holds
    ``cpus``, as the runtime copies its parent's. Returns the folders, tier first."""
    kubepods = root / "cpuset" / ("kubepods.slice" if driver == "systemd" else "kubepods")
    kubepods.mkdir(parents=True, exist_ok=True)
    (kubepods / "cpuset.cpus").write_text(f"{cpus}\n")
    folders = _cpuset_folders(root / "cpuset" / _be_qos_rel(driver), pods, driver)
    for d in folders:
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpuset.cpus").write_text(f"{cpus}\n")
        (d / "cpuset.mems").write_text("0\n")
    return folders


def write_cpuset_v2(root: Path, pods: list[FakePod], driver: str = "systemd", cpus: str = "0-7",
                    tier_enabled: bool = True, below_tier: bool = True) -> list[Path]:
    """cpuset files in a ``write_cgroup_v2`` tree: ``tier_enabled`` - kubepods passes the cpuset controller to the
    tier; ``below_tier`` - the tier passes it on to pods and containers. ``cpuset.cpus`` is empty (the parent's
    CPUs) as the kernel leaves it, ``cpuset.cpus.effective`` holds ``cpus``. Returns the folders, tier first."""
    tier = root / _be_qos_rel(driver)
    folders = _cpuset_folders(tier, pods, driver)
    (tier.parent / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n" if tier_enabled
                                                         else "cpu io memory pids\n")
    (tier / "cgroup.controllers").write_text("cpuset cpu io memory pids\n" if tier_enabled else "cpu io memory pids\n")
    (tier / "cgroup.subtree_control").write_text("cpuset cpu memory\n" if below_tier else "cpu memory\n")
    for d in folders:
        d.mkdir(parents=True, exist_ok=True)
        if tier_enabled and (d == tier or below_tier):
            (d / "cpuset.cpus").write_text("\n")
            (d / "cpuset.cpus.effective").write_text(f"{cpus}\n")
    return folders


def write_sysfs(root: Path, cpus: list[tuple[int, int, int, int]], offline: tuple[int, ...] = ()) -> Path:
    """``devices/system/{cpu,node}`` for (cpu, core, socket, NUMA node) rows; ``offline`` CPUs have no topology."""
    cpu_dir = root / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    online = sorted(c for c, *_ in cpus if c not in offline)
    (cpu_dir / "online").write_text(",".join(map(str, online)) + "\n")
    nodes: dict[int, list[int]] = {}
    for cpu, core, socket, node in cpus:
        d = cpu_dir / f"cpu{cpu}"
        d.mkdir(exist_ok=True)
        if cpu in offline:
            continue
        (d / "topology").mkdir(exist_ok=True)
        (d / "topology" / "core_id").write_text(f"{core}\n")
        (d / "topology" / "physical_package_id").write_text(f"{socket}\n")
        nodes.setdefault(node, []).append(cpu)
    for node, members in nodes.items():
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(",".join(map(str, sorted(members))) + "\n")
    return root
