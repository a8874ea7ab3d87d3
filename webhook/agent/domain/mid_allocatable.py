"""Mid allocatable: what koord-mid pods may use, published as kubernetes.io/mid-cpu/-memory (docs/agent.md, "Mid
resources"), as koord-manager's mid resource plugin computes it
(``pkg/slo-controller/noderesource/plugins/midresource/plugin.go``, with
``pkg/slo-controller/noderesource/plugins/util/util.go`` ``CalculateMidResourceByPolicy`` and
``CalculateMidResourceByStaticMode``; Koordinator v1.8.0). Its own module, as upstream's is its own plugin beside
the batch one: the two formulas share nothing but the node and the pods.

    static mode:  mid = min(capacity × midStatic*ReservedPercent, capacity × mid*ThresholdPercent)
    otherwise:    mid = min(max(min(prodReclaimable, nodeUnused), 0) + unallocated × midUnallocatedPercent,
                        capacity × mid*ThresholdPercent)

with ``nodeUnused = capacity − node usage`` and ``unallocated = max(capacity − max(kubelet reserved, the
reservation annotation, system usage) − Σ requests of the Running/Pending pods not in the mid, batch or free
bands, 0)``. ``prodReclaimable`` is the NodeMetric's, which koordlet predicts (``pkg/koordlet/prediction/
peak_predictor.go``, the min of two predictors); the agent computes it from what it measures instead, the peak of
each pod being its usage averaged over the window (``prod_reclaimable``). Every value is rounded down, in whole
milli-cores and bytes, in float64 arithmetic as upstream's (a Fraction a pod cost 1.5 ms a cycle at 250
pods: docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from webhook.agent.domain.slo_config import Colocation
from webhook.core.priority import KOORD_BATCH, KOORD_FREE, KOORD_MID, KOORD_NONE, KOORD_PROD
from webhook.core.resources import MID_CPU, MID_MEMORY

STATIC = "static"
# koordlet's --prediction-safety-margin-percent default (pkg/koordlet/prediction/config.go): the peak it predicts is
# raised by this much before anything is called reclaimable.
SAFETY_MARGIN_PERCENT = 10
LOW_BANDS = (KOORD_MID, KOORD_BATCH, KOORD_FREE)     # not "high priority" to getUnallocated
PROD_BANDS = (KOORD_PROD, KOORD_NONE)                # isPriorityClassReclaimableForProd


class MidPod(NamedTuple):
    """One unfinished pod bound to the node: its Koordinator priority class (``GetPodPriorityClassWithDefault``),
    whether it is Running or Pending (``getUnallocated`` counts only those), its cpu/memory requests (the
    scheduler's ``PodRequests``) and its usage averaged over the window (None: never measured)."""

    priority_class: str
    running_or_pending: bool
    cpu_request_milli: int
    memory_request: int
    cpu_milli: float | None
    memory: float | None


class Node(NamedTuple):
    """The node's cpu (milli-cores) and memory (bytes): status.capacity, status.allocatable, what it reserves
    (max of kubelet reserved = capacity − allocatable and the ``node.koordinator.sh/reservation`` annotation) and
    its usage averaged over the window (None: not measured)."""

    capacity: tuple[int, int]
    allocatable: tuple[int, int]
    reserved: tuple[int, int]
    used: tuple[float, float] | None


@dataclass(frozen=True, slots=True)
class MidResult:
    cpu_milli: int
    memory: int
    explain: tuple[str, str]
    zero: tuple[str, ...] = ()      # the explain line of each value that is 0

    def resources(self) -> dict[str, int]:
        return {MID_CPU: self.cpu_milli, MID_MEMORY: self.memory}


def _percent(value: float, percent: int) -> int:
    # int64(float64(x) * ratio) upstream: float64 arithmetic, truncated, as floor is for what is never negative.
    return math.floor(value * percent / 100)


def _peak(usage: float) -> int:
    # MultiplyMilliQuant / MultiplyQuant by (100 + margin) / 100, truncated.
    return math.floor(usage * (100 + SAFETY_MARGIN_PERCENT) / 100)


def system_usage(used: tuple[float, float] | None, pods: Iterable[MidPod]) -> tuple[float, float]:
    """NodeMetric's systemUsage as the agent measures it: what the node uses beyond its pods, at least 0 (the
    agent has no host applications of its own: theirs is in it). (0, 0) with no node usage."""
    if used is None:
        return 0.0, 0.0
    pod_cpu, pod_mem = 0.0, 0.0
    for p in pods:
        if p.cpu_milli is not None:
            pod_cpu += p.cpu_milli
        if p.memory is not None:
            pod_mem += p.memory
    return max(used[0] - pod_cpu, 0.0), max(used[1] - pod_mem, 0.0)


def prod_reclaimable(allocatable: tuple[int, int], pods: Iterable[MidPod],
                     system: tuple[float, float]) -> tuple[int, int]:
    """(cpu milli, memory bytes) reclaimable from the prod pods, as koordlet's ``minPredictor`` of a
    ``podReclaimablePredictor`` and a ``priorityReclaimablePredictor`` over the pods of the prod band or none
    (``pkg/koordlet/prediction/peak_predictor.go``):

    - per pod: Σ max(request − peak, 0), at most allocatable − Σ peak;
    - per band: max(Σ request − (system + Σ usage) × 1.1, 0), at most allocatable − (system + Σ usage) × 1.1;

    where a pod's peak is its usage averaged over the window × (1 + 10 %), in place of koordlet's p95 (cpu) and
    p98 (memory) of a decaying histogram. A pod never measured counts nothing in the first (koordlet skips a pod
    whose prediction fails) but its request in the second, as there."""
    prod = [p for p in pods if p.priority_class in PROD_BANDS]
    out = []
    for i in (0, 1):
        reclaimable = unreclaimable = requests = 0
        band = system[i]
        for p in prod:
            request = (p.cpu_request_milli, p.memory_request)[i]
            usage = (p.cpu_milli, p.memory)[i]
            requests += request
            if usage is None:
                continue
            peak = _peak(usage)
            unreclaimable += peak
            reclaimable += max(request - peak, 0)
            band += usage
        by_pod = min(max(allocatable[i] - unreclaimable, 0), reclaimable)
        band_peak = _peak(band)
        by_band = min(max(allocatable[i] - band_peak, 0), max(requests - band_peak, 0))
        out.append(min(by_pod, by_band))
    return out[0], out[1]


def unallocated(capacity: tuple[int, int], reserved: tuple[int, int], system: tuple[float, float],
                pods: Iterable[MidPod]) -> tuple[int, int]:
    """``getUnallocated``: max(capacity − max(reserved, system usage) − Σ requests of the Running or Pending pods
    outside the mid, batch and free bands, 0)."""
    high = [0, 0]
    for p in pods:
        if p.priority_class not in LOW_BANDS and p.running_or_pending:
            high[0] += p.cpu_request_milli
            high[1] += p.memory_request
    cpu, mem = (math.floor(max(capacity[i] - max(reserved[i], system[i]) - high[i], 0))
                for i in (0, 1))
    return cpu, mem


def mid_allocatable(colo: Colocation, capacity: tuple[int, int], unused: tuple[int, int] | None,
                    reclaimable: tuple[int, int], free: tuple[int, int]) -> MidResult:
    """The plugin's ``calculate`` once its inputs are known: the node's ``capacity``, what is ``unused`` of it
    (capacity − node usage; None: no valid node usage, nothing is taken as unused, "to keep mid-resource
    calculations relatively strict"), the prod ``reclaimable`` and the ``free`` (unallocated) part."""
    static = colo.midReclaimMode == STATIC
    thresholds = (colo.midCPUThresholdPercent, colo.midMemoryThresholdPercent)
    statics = (colo.midStaticCPUReservedPercent, colo.midStaticMemoryReservedPercent)
    values, texts = [], []
    for i, label in enumerate(("CPU(milli-core)", "Memory(byte)")):
        cap = _percent(capacity[i], thresholds[i])
        if static:
            value = min(_percent(capacity[i], statics[i]), cap)
            text = (f"midAllocatable[{label}]:{value} = min(nodeCapacity:{capacity[i]} * staticReservedPercent:"
                    f"{statics[i]}%, nodeCapacity:{capacity[i]} * thresholdRatio:{thresholds[i]}%)")
        else:
            room = 0 if unused is None else unused[i]
            value = min(max(min(reclaimable[i], room), 0) + _percent(free[i], colo.midUnallocatedPercent), cap)
            text = (f"midAllocatable[{label}]:{value} = min(min(ProdReclaimable:{reclaimable[i]}, NodeUnused:{room})"
                    f" + Unallocated:{free[i]} * midUnallocatedRatio:{colo.midUnallocatedPercent}%, "
                    f"NodeCapacity:{capacity[i]} * thresholdRatio:{thresholds[i]}%)")
        values.append(value)
        texts.append(text)
    return MidResult(values[0], values[1], (texts[0], texts[1]),
                     tuple(t for v, t in zip(values, texts, strict=True) if v == 0))


def mid_from_usage(colo: Colocation, node: Node, pods: Iterable[MidPod]) -> MidResult:
    """Mid allocatable from what the agent measured: the NodeMetric's parts (system usage, prod reclaimable, node
    usage) worked out from the window's averages, then the plugin's formula."""
    pods = list(pods)
    system = system_usage(node.used, pods)
    used = node.used
    # Quantity.MilliValue() / Value() of capacity − usage: rounded up.
    unused = None if used is None else (math.ceil(node.capacity[0] - used[0]), math.ceil(node.capacity[1] - used[1]))
    return mid_allocatable(colo, node.capacity, unused, prod_reclaimable(node.allocatable, pods, system),
                           unallocated(node.capacity, node.reserved, system, pods))
