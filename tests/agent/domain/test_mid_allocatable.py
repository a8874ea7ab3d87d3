"""Mid allocatable (webhook/agent/domain/mid_allocatable.py): the cases of Koordinator v1.8.0's
``pkg/slo-controller/noderesource/plugins/midresource/plugin_test.go`` ``TestPluginCalculate``, their inputs and
expected values as this module's, each named after its upstream case; then the prod reclaimable the agent works out
from what it measures in place of koordlet's prediction."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.agent.domain.mid_allocatable import (
    MidPod,
    Node,
    mid_allocatable,
    mid_from_usage,
    prod_reclaimable,
    system_usage,
    unallocated,
)
from webhook.agent.domain.slo_config import Colocation
from webhook.core.priority import KOORD_BATCH, KOORD_MID, KOORD_NONE, KOORD_PROD

G = 10**9
# getTestNode: capacity 100 cores / 210G, allocatable 100 / 200G (kubelet reserved 0 / 10G).
CAPACITY, ALLOCATABLE, RESERVED = (100_000, 210 * G), (100_000, 200 * G), (0, 10 * G)
# testProdLSPod (koord-prod, 20 / 40G, Running) and testBatchBEPod (koord-batch, 15 / 30G, Running).
PODS = [MidPod(KOORD_PROD, True, 20_000, 40 * G, None, None), MidPod(KOORD_BATCH, True, 15_000, 30 * G, None, None)]
DYNAMIC = {"midStaticCPUReservedPercent": 10, "midStaticMemoryReservedPercent": 10}
STATIC = {"midReclaimMode": "static", "midCPUThresholdPercent": 10, "midMemoryThresholdPercent": 20,
          "midUnallocatedPercent": 10}


def _unused(usage: tuple[int, int] | None) -> tuple[int, int] | None:
    return None if usage is None else (CAPACITY[0] - usage[0], CAPACITY[1] - usage[1])


# (upstream case, strategy, node usage (None: NodeMetric without usage), system usage, prod reclaimable, expected
# (mid-cpu, mid-memory), the Unallocated upstream's message shows)
CASES = [
    ("calculate correctly when node metric is valid", DYNAMIC, (20_000, 45 * G), (0, 0), (10_000, 15 * G),
     (10_000, 15 * G), (80_000, 160 * G)),
    ("calculate correctly where the prod reclaimable exceeds the mid threshold",
     {**DYNAMIC, "midCPUThresholdPercent": 10, "midMemoryThresholdPercent": 20, "midUnallocatedPercent": 10},
     (30_000, 50 * G), (0, 0), (15_000, 30 * G), (10_000, 42 * G), (80_000, 160 * G)),
    ("calculate correctly when prod reclaimable is nil", DYNAMIC, (30_000, 50 * G), (0, 0), (0, 0), (0, 0),
     (80_000, 160 * G)),
    ("calculate correctly when set reserved resource in static mode: not exceed", {**DYNAMIC, **STATIC},
     (30_000, 50 * G), (0, 0), (15_000, 30 * G), (10_000, 21 * G), (80_000, 160 * G)),
    ("calculate correctly when set reserved resource in static mode: exceed",
     {**STATIC, "midStaticCPUReservedPercent": 100, "midStaticMemoryReservedPercent": 100},
     (30_000, 50 * G), (0, 0), (15_000, 30 * G), (10_000, 42 * G), (80_000, 160 * G)),
    ("calculate correctly where node metrics is invalid", DYNAMIC, None, (0, 0), (20_000, 20 * G), (0, 0),
     (80_000, 160 * G)),
    ("calculate correctly where the prod reclaimable exceeds the node free resource", DYNAMIC, (90_000, 200 * G),
     (0, 0), (20_000, 20 * G), (10_000, 10 * G), (80_000, 160 * G)),
    # A prod host application's usage is system usage there; the agent has no host applications, their usage is in
    # its system usage whatever their priority (so "including mid/batch host application usage", which leave it
    # out, have no counterpart here).
    ("including product host application usage", DYNAMIC, (30_000, 50 * G), (5_000, 15 * G), (0, 0), (0, 0),
     (75_000, 155 * G)),
]


@pytest.mark.parametrize(("case", "strategy", "usage", "system", "reclaimable", "expected", "free"), CASES,
                         ids=[c[0] for c in CASES])
def test_koordinators_plugin_cases(case: str, strategy: dict[str, Any], usage: tuple[int, int] | None,
                                   system: tuple[int, int], reclaimable: tuple[int, int],
                                   expected: tuple[int, int], free: tuple[int, int]) -> None:
    colo = Colocation(enable=True, degradeTimeMinutes=10, **strategy)
    got_free = unallocated(CAPACITY, RESERVED, (float(system[0]), float(system[1])), PODS)
    assert got_free == free, case
    result = mid_allocatable(colo, CAPACITY, _unused(usage), reclaimable, got_free)
    assert (result.cpu_milli, result.memory) == expected, case
    assert result.zero == tuple(t for v, t in zip(expected, result.explain, strict=True) if v == 0)


def test_the_explain_lines_say_the_formula() -> None:
    colo = Colocation(enable=True, midCPUThresholdPercent=10, midUnallocatedPercent=10)
    result = mid_allocatable(colo, CAPACITY, (70_000, 160 * G), (15_000, 30 * G), (80_000, 160 * G))
    assert result.explain[0] == ("midAllocatable[CPU(milli-core)]:10000 = min(min(ProdReclaimable:15000, "
                                 "NodeUnused:70000) + Unallocated:80000 * midUnallocatedRatio:10%, "
                                 "NodeCapacity:100000 * thresholdRatio:10%)")
    static = mid_allocatable(Colocation(midReclaimMode="static", midStaticMemoryReservedPercent=10), CAPACITY,
                             None, (0, 0), (0, 0))
    assert static.explain[1] == ("midAllocatable[Memory(byte)]:21000000000 = min(nodeCapacity:210000000000 * "
                                 "staticReservedPercent:10%, nodeCapacity:210000000000 * thresholdRatio:100%)")
    assert static.resources() == {"kubernetes.io/mid-cpu": 0, "kubernetes.io/mid-memory": 21 * G}


def test_unallocated_counts_the_running_and_pending_pods_outside_the_low_bands() -> None:
    pods = [MidPod(KOORD_PROD, True, 1000, G, None, None), MidPod(KOORD_NONE, True, 2000, 2 * G, None, None),
            MidPod(KOORD_MID, True, 4000, 4 * G, None, None), MidPod(KOORD_PROD, False, 8000, 8 * G, None, None)]
    # reserved: max(kubelet/annotation 500 m / 1G, system usage 700 m / 0.5G)
    assert unallocated((10_000, 16 * G), (500, G), (700.0, float(G // 2)), pods) == (6300, 12 * G)
    assert unallocated((1000, G), (0, 0), (0.0, 0.0), pods) == (0, 0)


def test_system_usage_is_the_node_beyond_its_pods() -> None:
    pods = [MidPod(KOORD_PROD, True, 0, 0, 300.5, 10.0), MidPod(KOORD_BATCH, True, 0, 0, None, 5.0)]
    assert system_usage((1000.5, 100.0), pods) == (700.0, 85.0)
    assert system_usage((100.0, 1.0), pods) == (0.0, 0.0)
    assert system_usage(None, pods) == (0.0, 0.0)


def test_prod_reclaimable_is_the_smaller_of_koordlets_two_predictors() -> None:
    # Two prod pods of 4000 m / 8G requests using 1000 m / 2G each (peak × 1.1: 1100 m / 2.2G): by pod
    # Σ(4000 − 1100) = 5800; by band 8000 − (system 400 + 2000) × 1.1 = 5360. Memory: by pod 2 × 5.8G = 11.6G, by band
    # 16G − (1G + 4G) × 1.1 = 10.5G. A batch pod and a mid pod count in neither.
    pods = [MidPod(KOORD_PROD, True, 4000, 8 * G, 1000.0, 2.0 * G), MidPod(KOORD_PROD, True, 4000, 8 * G, 1000.0, 2.0 * G),
            MidPod(KOORD_BATCH, True, 3000, 3 * G, 2000.0, 2.0 * G), MidPod(KOORD_MID, True, 1000, G, 500.0, G / 2)]
    system = (400.0, float(G))
    assert prod_reclaimable((10_000, 32 * G), pods, system) == (5360, 10_500_000_000)
    # The allocatable caps both: allocatable − Σ peak (by pod), allocatable − band peak (by band).
    assert prod_reclaimable((4000, 6 * G), pods, system) == (1360, 500_000_000)
    # A prod pod never measured: nothing by pod, its request by band.
    unmeasured = [MidPod(KOORD_PROD, True, 4000, 8 * G, None, None)]
    assert prod_reclaimable((10_000, 32 * G), unmeasured, (0.0, 0.0)) == (0, 0)
    assert prod_reclaimable((10_000, 32 * G), [*unmeasured, pods[0]], (0.0, 0.0)) == (2900, 5_800_000_000)


def test_from_usage_puts_the_parts_together() -> None:
    node = Node((4000, 8 * G), (4000, 8 * G), (0, 0), (1500.0, 3.0 * G))
    pods = [MidPod(KOORD_PROD, True, 2000, 4 * G, 1000.0, 2.0 * G)]
    # system 500 m / 1G; reclaimable min(2000 − 1100, 2000 − 1650) = 350, min(4G − 2.2G, 4G − 3.3G) = 0.7G;
    # unused 2500 / 5G; unallocated 4000 − 500 − 2000 = 1500, 8G − 1G − 4G = 3G, 50 % of it.
    result = mid_from_usage(Colocation(midUnallocatedPercent=50), node, pods)
    assert (result.cpu_milli, result.memory) == (350 + 750, 700_000_000 + 1_500_000_000)
    # No node usage: nothing is unused, only the unallocated part (from the reserved alone) counts.
    idle = mid_from_usage(Colocation(midUnallocatedPercent=50), node._replace(used=None), pods)
    assert (idle.cpu_milli, idle.memory) == (1000, 2 * G)
