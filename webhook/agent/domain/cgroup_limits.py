"""BE pods' batch resources as cgroup limits (Koordinator's batch-resource hook), pure.

``pod_limits`` says what each level of a BE pod asks for (from ``node.koordinator.sh/extended-resource-spec``
when present, else the containers' resources); the converters turn that into the kernel's units with the
kubelet's rules; ``plan_writes`` lists, in a safe order, the writes that bring the cgroup folders from what
they hold to what is wanted. A limit is never raised above what the pod asked for; a level that asks for
nothing is left alone (no write), so a limit set by someone else is never removed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.core.extended_resource_spec import EXTENDED_RESOURCE_SPEC, parse_extended_resource_spec
from webhook.core.quantity import QuantityError, exact_add, int_value, milli_value, parse_quantity
from webhook.core.resources import (
    BATCH_CPU,
    BATCH_MEMORY,
    BATCH_NAMES,
    CPU,
    LEGACY_BATCH,
    MEMORY,
    iter_containers,
    pod_total,
)

UNLIMITED = -1
DEFAULT_CFS_PERIOD = 100_000      # µs; the kubelet's and the kernel's default
MIN_CFS_QUOTA = 1_000             # µs; the kernel refuses less (kubelet MinQuotaPeriod)
MIN_SHARES, MAX_SHARES = 2, 262_144
SHARES_PER_CPU = 1024
# v1 memory.limit_in_bytes reads back PAGE_COUNTER_MAX × page size when unlimited; anything this big is "none".
UNLIMITED_MEMORY_FLOOR = 2**62

V1_FILES = {"quota": "cpu.cfs_quota_us", "period": "cpu.cfs_period_us", "weight": "cpu.shares",
            "memory": "memory.limit_in_bytes"}
V2_FILES = {"quota": "cpu.max", "period": "cpu.max", "weight": "cpu.weight", "memory": "memory.max"}


def files(version: int) -> Mapping[str, str]:
    """The file holding each setting (quota, period, weight, memory) for a cgroup version."""
    return V1_FILES if version == 1 else V2_FILES


# -- what a BE pod asks for ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Limits:
    """What one cgroup level asks for; None where it asks for nothing."""

    cpu_limit_milli: int | None = None
    cpu_request_milli: int | None = None
    memory_limit: int | None = None

    @property
    def empty(self) -> bool:
        return self.cpu_limit_milli is None and self.cpu_request_milli is None and self.memory_limit is None


@dataclass(frozen=True, slots=True)
class PodLimits:
    pod: Limits
    containers: Mapping[str, Limits]      # by container name, init containers included


def _parsed(values: Any) -> dict[str, Decimal]:
    """The batch values of a ResourceList, by Koordinator's names: the legacy ``alibabacloud.com/reclaimed-*``
    count as the batch resource they are (a pod writes one protocol; the validating chain refuses both)."""
    out: dict[str, Decimal] = {}
    if isinstance(values, dict):
        for name in BATCH_NAMES:
            if name in values:
                try:
                    out[LEGACY_BATCH.get(name, name)] = parse_quantity(values[name])
                except QuantityError:
                    continue
    return out


def _batch_lists(container: dict[str, Any], spec: Mapping[str, Any]) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """(limits, requests) of a container's batch resources; a request defaults to the limit (API defaulting)."""
    entry = spec.get(str(container.get("name", "")))
    if isinstance(entry, dict):
        limits = {k: v for k, v in (entry.get("limits") or {}).items() if k in (BATCH_CPU, BATCH_MEMORY)}
        requests = {k: v for k, v in (entry.get("requests") or {}).items() if k in (BATCH_CPU, BATCH_MEMORY)}
    else:
        res = container.get("resources")
        res = res if isinstance(res, dict) else {}
        limits, requests = _parsed(res.get("limits")), _parsed(res.get("requests"))
    return limits, {**limits, **requests}


def sandbox_overhead(pod: dict[str, Any]) -> dict[str, Decimal]:
    """``spec.overhead``'s cpu and memory in batch units (milli-cores, bytes), by the batch names; empty for the
    pods without one."""
    overhead = (pod.get("spec") or {}).get("overhead")
    out: dict[str, Decimal] = {}
    if isinstance(overhead, dict):
        for native, name, whole in ((CPU, BATCH_CPU, milli_value), (MEMORY, BATCH_MEMORY, int_value)):
            if native in overhead:
                try:
                    out[name] = Decimal(whole(parse_quantity(overhead[native])))
                except QuantityError:
                    continue
    return out


def _positive(q: Decimal | None) -> int | None:
    value = int_value(q) if q is not None else 0
    return value if value > 0 else None


def pod_limits(pod: dict[str, Any]) -> PodLimits:
    """Container and pod levels of a pod's batch-cpu (milli-cores) and batch-memory (bytes).

    A pod-level limit exists only when every container (init containers too) has one, and is their
    k8s ``PodLimits`` total, as the kubelet sets pod-level limits; requests add up the same way. The pod level
    also holds the sandbox overhead (``sandbox_overhead``), as the kubelet's pod-level limits and requests do.
    """
    meta = pod.get("metadata") or {}
    annotation = parse_extended_resource_spec((meta.get("annotations") or {}).get(EXTENDED_RESOURCE_SPEC))
    spec: Mapping[str, Any] = (annotation or {}).get("containers") or {}
    containers: dict[str, Limits] = {}
    cpu_declared = mem_declared = True
    lists: dict[int, tuple[dict[str, Decimal], dict[str, Decimal]]] = {}
    for _, _, c in iter_containers(pod.get("spec") or {}):
        limits, requests = lists[id(c)] = _batch_lists(c, spec)
        cpu_declared &= _positive(limits.get(BATCH_CPU)) is not None
        mem_declared &= _positive(limits.get(BATCH_MEMORY)) is not None
        containers[str(c.get("name", ""))] = Limits(_positive(limits.get(BATCH_CPU)),
                                                    _positive(requests.get(BATCH_CPU)),
                                                    _positive(limits.get(BATCH_MEMORY)))
    if not containers:
        return PodLimits(Limits(), {})
    limit_total = pod_total(pod, lambda c: dict(lists[id(c)][0]) if id(c) in lists else {})
    request_total = pod_total(pod, lambda c: dict(lists[id(c)][1]) if id(c) in lists else {})
    # The sandbox overhead (spec.overhead, the RuntimeClass's) stays native cpu/memory on a batch pod; it runs in
    # the pod's cgroup, and the kubelet adds it to the pod level's requests and to the limits that exist.
    for name, value in sandbox_overhead(pod).items():
        request_total[name] = exact_add(request_total.get(name, Decimal(0)), value)
        if name in limit_total:
            limit_total[name] += value
    pod_level = Limits(_positive(limit_total.get(BATCH_CPU)) if cpu_declared else None,
                       _positive(request_total.get(BATCH_CPU)),
                       _positive(limit_total.get(BATCH_MEMORY)) if mem_declared else None)
    return PodLimits(pod_level, containers)


# -- the kernel's units (kubelet conversions) --------------------------------------------------------------
def cfs_quota(milli: int, period: int) -> int:
    """``cpu.cfs_quota_us`` for a milli-core limit (kubelet ``MilliCPUToQuota``, floor 1000 µs)."""
    return max(milli * period // 1000, MIN_CFS_QUOTA)


def cpu_shares(milli: int) -> int:
    """``cpu.shares`` for a milli-core request (kubelet ``MilliCPUToShares``)."""
    return min(max(milli * SHARES_PER_CPU // 1000, MIN_SHARES), MAX_SHARES)


def cpu_weight(shares: int) -> int:
    """cgroup v2 ``cpu.weight`` for cpu.shares (kubelet ``CpuSharesToCpuWeight``)."""
    return 1 + (shares - 2) * 9999 // 262142


def page_floor(value: int, page_size: int) -> int:
    """The kernel keeps memory limits in whole pages and reads them back so: write what will read back."""
    return value // page_size * page_size


# -- what the folders hold ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Current:
    """Settings read from a folder; None where the file is missing or unreadable (then nothing is written)."""

    quota: int | None = None      # µs per period, or UNLIMITED
    period: int | None = None
    weight: int | None = None     # cpu.shares (v1) or cpu.weight (v2)
    memory: int | None = None     # bytes, or UNLIMITED


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def parse_current(version: int, texts: Mapping[str, str | None]) -> Current:
    """``texts``: file name -> content (None when unreadable), for the files of ``files(version)``."""
    f = files(version)
    if version == 1:
        quota, period = _int(texts.get(f["quota"])), _int(texts.get(f["period"]))
        if quota is not None and quota < 0:
            quota = UNLIMITED
    else:
        quota = period = None
        parts = (texts.get(f["quota"]) or "").split()
        if len(parts) == 2:
            quota = UNLIMITED if parts[0] == "max" else _int(parts[0])
            period = _int(parts[1])
            if quota is None or period is None:
                quota = period = None
    memory_text = texts.get(f["memory"])
    memory = UNLIMITED if memory_text is not None and memory_text.strip() in ("max", "-1") else _int(memory_text)
    if memory is not None and memory >= UNLIMITED_MEMORY_FLOOR:
        memory = UNLIMITED
    return Current(quota, period, _int(texts.get(f["weight"])), memory)


def quota_text(version: int, quota: int, period: int) -> str:
    if version == 1:
        return str(UNLIMITED if quota == UNLIMITED else quota)
    return f"{'max' if quota == UNLIMITED else quota} {period}"


def memory_text(version: int, value: int) -> str:
    if value == UNLIMITED:
        return "-1" if version == 1 else "max"
    return str(value)


# -- the plan ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Folder:
    """One cgroup folder the agent may write: a BE pod's, a BE container's, or the besteffort QoS folder."""

    cpu_path: str | None                    # the cpu controller's folder, relative to the cgroup root
    memory_path: str | None                 # the memory controller's folder (v2: the same folder)
    current: Current
    limits: Limits = field(default_factory=Limits)   # what the pod asks for at this level
    quota: int | None = None                # a quota the agent sets itself (BE suppression), µs or UNLIMITED
    children: tuple[Folder, ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupWrite:
    path: str       # folder relative to --cgroup-root
    file: str
    value: str      # the exact text written

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "file": self.file, "value": self.value}


def _ratio(quota: int, period: int) -> int:
    """The kernel's ``to_ratio`` (BW_SHIFT 20): what cgroup v1 compares between parent and child."""
    return (quota << 20) // period


def _fit(quota: int, period: int, parent: tuple[int, int] | None) -> int:
    """cgroup v1 refuses (EINVAL) a child quota above its nearest limited ancestor's: clamp to fit."""
    if parent is None:
        return quota
    p_quota, p_period = parent
    limit = _ratio(p_quota, p_period)
    if quota != UNLIMITED and _ratio(quota, period) <= limit:
        return quota
    # floor(p_quota * period / p_period) never has a larger ratio than the parent's (both floor the same
    # fraction), so the kernel takes it.
    return p_quota * period // p_period


def _above(new: int, old: int) -> bool:
    """Whether ``new`` is a looser limit than ``old`` (UNLIMITED is the loosest)."""
    if new == UNLIMITED:
        return old != UNLIMITED
    return old != UNLIMITED and new > old


@dataclass
class _Plan:
    version: int
    page_size: int
    looser: list[tuple[int, CgroupWrite]] = field(default_factory=list)    # raises and plain settings
    tighter: list[tuple[int, CgroupWrite]] = field(default_factory=list)   # lowered limits

    def add(self, depth: int, write: CgroupWrite, tighter: bool) -> None:
        (self.tighter if tighter else self.looser).append((depth, write))

    def walk(self, folder: Folder, depth: int, parent: tuple[int, int] | None) -> None:
        cur, want, f = folder.current, folder.limits, files(self.version)
        bound = parent
        if folder.cpu_path is not None and cur.quota is not None and cur.period:
            target = folder.quota
            if target is None and want.cpu_limit_milli is not None:
                target = cfs_quota(want.cpu_limit_milli, cur.period)
            if target is None and self.version == 1 and cur.quota != UNLIMITED:
                target = cur.quota      # asks nothing, but must still fit under a tightened parent
            final = cur.quota
            if target is not None:
                if self.version == 1:
                    target = _fit(target, cur.period, parent)
                if target != cur.quota:
                    self.add(depth, CgroupWrite(folder.cpu_path, f["quota"],
                                                quota_text(self.version, target, cur.period)),
                             not _above(target, cur.quota))
                    final = target
            if final != UNLIMITED and (parent is None or _ratio(final, cur.period) < _ratio(*parent)):
                bound = (final, cur.period)
        if folder.cpu_path is not None and cur.weight is not None and want.cpu_request_milli is not None:
            shares = cpu_shares(want.cpu_request_milli)
            weight = shares if self.version == 1 else cpu_weight(shares)
            if weight != cur.weight:
                self.add(depth, CgroupWrite(folder.cpu_path, f["weight"], str(weight)), False)
        if folder.memory_path is not None and cur.memory is not None and want.memory_limit is not None:
            target = page_floor(want.memory_limit, self.page_size)
            if target != cur.memory:
                self.add(depth, CgroupWrite(folder.memory_path, f["memory"], memory_text(self.version, target)),
                         not _above(target, cur.memory))
        for child in folder.children:
            self.walk(child, depth + 1, bound if self.version == 1 else None)

    def writes(self) -> list[CgroupWrite]:
        # Loosening goes parent first, tightening child first: on cgroup v1 a child's CPU quota may never
        # exceed its parent's, so this order is the only one the kernel accepts at every step.
        looser = [w for _, w in sorted(self.looser, key=lambda dw: dw[0])]
        tighter = [w for _, w in sorted(self.tighter, key=lambda dw: -dw[0])]
        return looser + tighter


def plan_writes(version: int, roots: Sequence[Folder], page_size: int) -> list[CgroupWrite]:
    """Every write that brings ``roots`` (and their children) to what they ask for, in a safe order.

    On cgroup v1 a child's quota is clamped to its nearest limited ancestor's (the kernel would refuse
    more, and enforces no more anyway), so BE suppression can lower the besteffort folder's quota below
    what a BE pod asked for; the pod's own quota returns when the suppression lifts.
    """
    plan = _Plan(version, page_size)
    for root in roots:
        plan.walk(root, 0, None)
    return plan.writes()


def iter_folders(roots: Sequence[Folder]) -> Iterator[Folder]:
    for root in roots:
        yield root
        yield from iter_folders(root.children)


# -- folder names (kubelet and container runtimes) -------------------------------------------------------------
_SYSTEMD_SCOPES = {"containerd": "cri-containerd-{}.scope", "docker": "docker-{}.scope", "cri-o": "crio-{}.scope"}
_CGROUPFS_DIRS = {"containerd": "{}", "docker": "{}", "cri-o": "crio-{}"}
BESTEFFORT_FOLDER = {"systemd": "kubepods-besteffort.slice", "cgroupfs": "besteffort"}


def container_folder(container_id: str, driver: str) -> str | None:
    """A container's cgroup folder name inside its pod's, from ``status.containerStatuses[].containerID``."""
    runtime, sep, cid = container_id.partition("://")
    if not sep or not cid or "/" in cid or cid in (".", ".."):
        return None
    pattern = (_SYSTEMD_SCOPES if driver == "systemd" else _CGROUPFS_DIRS).get(runtime)
    return pattern.format(cid) if pattern else None


def container_ids(pod: dict[str, Any]) -> dict[str, str]:
    """Container name -> container ID of the running (or last) instance, init containers included."""
    status = pod.get("status") or {}
    out: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for s in status.get(key) or []:
            if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("containerID"), str):
                out[s["name"]] = s["containerID"]
    return out
