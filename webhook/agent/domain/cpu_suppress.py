"""BE CPU suppression, ``cfsQuota`` policy (Koordinator koordlet ``cpusuppress``), pure.

    suppress(BE) = capacity × cpuSuppressThresholdPercent/100 − Σ usage(non-BE pods) − systemUsage
    systemUsage  = max(node usage − Σ usage(all pods), node reserved)

in milli-cores, floored at capacity × cpuSuppressMinPercent/100 when that is set. The besteffort QoS
cgroup's quota is then ``suppress × period / 1000`` µs, never below 2000 µs, and raised by at most 10 % of the
node's cores per cycle. It is left alone (hysteresis) unless the target moves by at least

    max(1 % of the node's cores, 0.1 core, 5 % of the current quota)    for a fall (written whole, at once)
    max(1 % of the node's cores, 0.1 core, 10 % of the current quota)   for a rise

or is the 2000 µs floor. koordlet (``adjustByCfsQuota`` in
``pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go``) has only the first term, both ways: on a
small node that is below the noise between 1 s samples (2000 µs on 2 CPUs): the quota was rewritten about
every second, and on cgroup v1 every BE folder clamped under it with it (docs/agent.md, BE CPU suppression).
The noise is absolute where BE gets little (LS and system usage jitter between samples: the 0.1 core) and
grows with the quota where BE gets much (the 5 and 10 %). A fall makes room for LS, so it needs half the move
a rise needs (a rise can wait) and is never stepped; what BE may hold over its budget meanwhile (one band) is
small beside the headroom the threshold keeps for LS (35 % of the node at 65 %).

A pod counts as BE when its Koordinator QoS is BE or its kubelet QoS is BestEffort (both live in the
besteffort cgroup); a measured pod the agent has no object for counts as non-BE.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.agent.domain.cgroup_limits import UNLIMITED
from webhook.agent.domain.cpuset import MAX_INCREASE_RATIO, cpuset_size, node_reservation
from webhook.core.quantity import QuantityError, int_value, milli_value, parse_quantity
from webhook.core.resources import CPU, MEMORY

CFS_QUOTA_POLICY = "cfsQuota"
BE_MIN_QUOTA = 2000                 # µs per period: koordlet's floor for the besteffort quota
BYPASS_DELTA_RATIO = 0.01           # koordlet: smaller moves than 1 % of the node's cores are not written
NOISE_BAND_MILLI = 100              # nor smaller than 0.1 core: LS and system usage jitter that much per sample
FALL_BAND_RATIO = 0.05              # nor a fall of less than 5 % of the current quota,
RISE_BAND_RATIO = 0.10              # or a rise of less than 10 % of it: BE's rise can wait, LS's need cannot


@dataclass(frozen=True, slots=True)
class Suppression:
    milli: int                      # what BE pods may use, milli-cores (negative when LS already uses more)
    non_be_milli: int
    system_milli: int
    explain: str


def suppress_milli(capacity_milli: int, threshold_percent: int, min_percent: int | None, node_used_milli: float,
                   pods: Iterable[tuple[bool, float]], reserved_milli: int) -> Suppression:
    """``pods``: (counts as BE, measured milli-cores) for every measured pod."""
    all_used = non_be = 0.0
    for be, used in pods:
        all_used += used
        if not be:
            non_be += used
    system = max(node_used_milli - all_used, 0.0)
    system_milli = max(int(system), reserved_milli)
    non_be_milli = int(non_be)
    value = capacity_milli * threshold_percent // 100 - non_be_milli - system_milli
    floor = None
    if min_percent is not None:
        floor = capacity_milli * min_percent // 100
        value = max(value, floor)
    explain = (f"suppress(BE)[CPU(Milli-Core)]:{value} = capacity:{capacity_milli} × {threshold_percent}% "
               f"- podNonBEUsed:{non_be_milli} - systemUsed:{system_milli}"
               + (f", floor {floor}" if floor is not None else ""))
    return Suppression(value, non_be_milli, system_milli, explain)


def be_quota(milli: int, period: int) -> int:
    """The besteffort folder's quota for ``milli`` cores (koordlet ``adjustByCfsQuota``)."""
    return max(int(milli * period / 1000), BE_MIN_QUOTA)


def next_be_quota(target: int, current: int, capacity_cores: int, period: int) -> int | None:
    """The quota to write this cycle, or None to leave ``current`` (a move within the noise: module docstring)."""
    if target == current:
        return None
    if current == UNLIMITED or target == BE_MIN_QUOTA:
        return target            # the first quota goes straight there, and the floor always (koordlet)
    band = max(capacity_cores * period * BYPASS_DELTA_RATIO, NOISE_BAND_MILLI * period / 1000)
    if target < current:
        return target if current - target >= max(band, current * FALL_BAND_RATIO) else None
    if target - current < max(band, current * RISE_BAND_RATIO):
        return None
    return min(target, current + int(capacity_cores * period * MAX_INCREASE_RATIO))   # scale up slowly


def _quantity(raw: Any, milli: bool) -> int | None:
    try:
        if raw is None:
            return None
        q = parse_quantity(raw)
        return milli_value(q) if milli else int_value(q)
    except QuantityError:
        return None


def node_reserved(node: Mapping[str, Any] | None) -> tuple[int, int]:
    """(cpu milli-cores, memory bytes) the node reserves: per resource, max(kubelet reserved = capacity −
    allocatable, the ``node.koordinator.sh/reservation`` annotation: its ``reservedCPUs`` counted as whole CPUs in
    place of its ``resources.cpu``, as ``GetNodeReservationResources``)."""
    status = (node or {}).get("status") or {}
    doc = node_reservation(node)
    given = doc.get("resources") if doc is not None else None
    resources: Mapping[str, Any] = given if isinstance(given, dict) else {}
    out = []
    for name, milli in ((CPU, True), (MEMORY, False)):
        capacity = _quantity((status.get("capacity") or {}).get(name), milli)
        allocatable = _quantity((status.get("allocatable") or {}).get(name), milli)
        kubelet = max(capacity - allocatable, 0) if capacity is not None and allocatable is not None else 0
        annotated = _quantity(resources.get(name), milli) or 0
        if name == CPU and doc is not None:
            cpus = doc.get("reservedCPUs")
            size = cpuset_size(cpus) if isinstance(cpus, str) and cpus else None
            if size is not None:
                annotated = size * 1000
        out.append(max(kubelet, annotated))
    return out[0], out[1]


def node_reserved_milli(node: Mapping[str, Any] | None) -> int:
    """The cpu of ``node_reserved``: max(kubelet reserved = capacity − allocatable, the
    ``node.koordinator.sh/reservation`` annotation)."""
    return node_reserved(node)[0]


def capacity_cores(capacity_milli: int) -> int:
    """Whole cores, rounded up (``Quantity.Value()``), as koordlet scales its steps."""
    return -(-capacity_milli // 1000)
