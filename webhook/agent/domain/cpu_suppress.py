"""BE CPU suppression, ``cfsQuota`` policy (Koordinator koordlet ``cpusuppress``), pure.

    suppress(BE) = capacity × cpuSuppressThresholdPercent/100 − Σ usage(non-BE pods) − systemUsage
    systemUsage  = max(node usage − Σ usage(all pods), node reserved)

in milli-cores, floored at capacity × cpuSuppressMinPercent/100 when that is set. The besteffort QoS
cgroup's quota is then ``suppress × period / 1000`` µs, never below 2000 µs, left alone when it would move
by less than 1 % of the node's cores, and raised by at most 10 % of the node's cores per cycle.
A pod counts as BE when its Koordinator QoS is BE or its kubelet QoS is BestEffort (both live in the
besteffort cgroup); a measured pod the agent has no object for counts as non-BE.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.agent.domain.cgroup_limits import UNLIMITED
from webhook.agent.domain.cpuset import MAX_INCREASE_RATIO, cpuset_size, node_reservation
from webhook.core.quantity import QuantityError, milli_value, parse_quantity
from webhook.core.resources import CPU

CFS_QUOTA_POLICY = "cfsQuota"
BE_MIN_QUOTA = 2000                 # µs per period: koordlet's floor for the besteffort quota
BYPASS_DELTA_RATIO = 0.01           # smaller moves than 1 % of the node's cores are not written


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
    """The quota to write this cycle, or None to leave ``current`` (a move too small to matter)."""
    if current != UNLIMITED and abs(target - current) < capacity_cores * period * BYPASS_DELTA_RATIO \
            and target != BE_MIN_QUOTA:
        return None
    step = int(capacity_cores * period * MAX_INCREASE_RATIO)
    if current != UNLIMITED and target - current > step:
        target = current + step  # scale up slowly once a quota is in place
    return None if target == current else target


def _quantity_milli(raw: Any) -> int | None:
    try:
        return milli_value(parse_quantity(raw)) if raw is not None else None
    except QuantityError:
        return None


def node_reserved_milli(node: Mapping[str, Any] | None) -> int:
    """max(kubelet reserved = capacity − allocatable, the ``node.koordinator.sh/reservation`` annotation)."""
    status = (node or {}).get("status") or {}
    capacity = _quantity_milli((status.get("capacity") or {}).get(CPU))
    allocatable = _quantity_milli((status.get("allocatable") or {}).get(CPU))
    kubelet = max(capacity - allocatable, 0) if capacity is not None and allocatable is not None else 0
    doc = node_reservation(node)
    annotated = 0
    if doc is not None:
        cpus = doc.get("reservedCPUs")
        size = cpuset_size(cpus) if isinstance(cpus, str) and cpus else None
        if size is not None:
            annotated = size * 1000
        elif isinstance(doc.get("resources"), dict):
            annotated = _quantity_milli(doc["resources"].get(CPU)) or 0
    return max(kubelet, annotated)


def capacity_cores(capacity_milli: int) -> int:
    """Whole cores, rounded up (``Quantity.Value()``), as koordlet scales its steps."""
    return -(-capacity_milli // 1000)
