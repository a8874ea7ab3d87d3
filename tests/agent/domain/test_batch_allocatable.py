"""Batch allocatable (the formula in docs/agent.md, "What it does, every cycle"), usage window, anti-churn, degrade, node status patch body."""

from __future__ import annotations

from typing import Any

import pytest

from harness.apiserver import load_exchange
from webhook.agent.domain.batch_allocatable import (
    PodLoad,
    UsageWindow,
    batch_allocatable,
    degraded,
    needs_update,
    published,
    status_patch,
    withheld,
    zero_reason,
)
from webhook.agent.inputs import pod_view
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY

GI = 2**30


def hp(cpu: float | None, mem: float | None, cpu_req: int = 0, mem_req: int = 0) -> PodLoad:
    return PodLoad(False, cpu, mem, cpu_req, mem_req)


def be(cpu: float | None, mem: float | None) -> PodLoad:
    return PodLoad(True, cpu, mem, 0, 0)


@pytest.mark.parametrize("name,args,cpu,memory", [
    # A worked example of the formula: 100 cores, 65% -> 65000 - system 7000 - HP 33000 = 25000 milli.
    ("worked example", dict(alloc_cpu_milli=100000, alloc_memory=100 * GI, node_cpu_milli=40000 + 5000,
                            node_memory=0, pods=[hp(33000, 0), be(5000, 0)], cpu_percent=65, memory_percent=65),
     25000, 65 * GI),
    ("clamped at 0", dict(alloc_cpu_milli=1000, alloc_memory=GI, node_cpu_milli=900, node_memory=GI,
                          pods=[hp(900, GI)], cpu_percent=65, memory_percent=65), 0, 0),
    ("BE usage is not subtracted", dict(alloc_cpu_milli=8000, alloc_memory=32 * GI, node_cpu_milli=4000,
                                        node_memory=16 * GI, pods=[be(4000, 16 * GI)], cpu_percent=65,
                                        memory_percent=65), 5200, int(32 * GI * 0.65)),
    ("system usage = node - all pods", dict(alloc_cpu_milli=8000, alloc_memory=32 * GI, node_cpu_milli=3000,
                                            node_memory=10 * GI, pods=[hp(1000, 4 * GI), be(1000, 2 * GI)],
                                            cpu_percent=65, memory_percent=65),
     5200 - 1000 - 1000, int(32 * GI * 0.65) - 4 * GI - 4 * GI),
    ("unmeasured HP pod counts its request", dict(alloc_cpu_milli=8000, alloc_memory=32 * GI, node_cpu_milli=0,
                                                  node_memory=0, pods=[hp(None, None, 2000, 4 * GI)],
                                                  cpu_percent=65, memory_percent=65),
     3200, int(32 * GI * 0.65) - 4 * GI),
    ("memory policy request", dict(alloc_cpu_milli=8000, alloc_memory=32 * GI, node_cpu_milli=1000,
                                   node_memory=GI, pods=[hp(1000, GI, 2000, 8 * GI)], cpu_percent=65,
                                   memory_percent=65, memory_policy="request"),
     4200, int(32 * GI * 0.65) - 8 * GI),
    ("whole milli-cores and bytes, rounded down", dict(alloc_cpu_milli=1001, alloc_memory=1001, node_cpu_milli=0,
                                                       node_memory=0, pods=[], cpu_percent=65, memory_percent=65),
     650, 650),
])
def test_batch_allocatable(name: str, args: dict[str, Any], cpu: int, memory: int) -> None:
    r = batch_allocatable(**args)
    assert (r.cpu_milli, r.memory) == (cpu, memory)
    assert isinstance(r.cpu_milli, int) and isinstance(r.memory, int)


ZERO_CASES = [
    # (name, arguments over a 8-core 32Gi node with no pods, reasons)
    ("nothing is 0", {}, ()),
    ("no node capacity", dict(alloc_cpu_milli=0, alloc_memory=0),
     ("batch-cpu 0: no node capacity (allocatable 0)", "batch-memory 0: no node capacity (allocatable 0)")),
    ("a 0% threshold", dict(cpu_percent=0), ("batch-cpu 0: the reclaim threshold is 0%",)),
    ("usage above the threshold", dict(node_cpu_milli=6000, pods=[hp(6000, 0)]),
     ("batch-cpu 0: usage above the threshold (non-BE 6000 + system 0 >= allocatable 8000 × 65%)",)),
]


@pytest.mark.parametrize("name,args,reasons", ZERO_CASES, ids=[c[0] for c in ZERO_CASES])
def test_a_zero_says_why(name: str, args: dict[str, Any], reasons: tuple[str, ...]) -> None:
    base = dict(alloc_cpu_milli=8000, alloc_memory=32 * GI, node_cpu_milli=0, node_memory=0, pods=[],
                cpu_percent=65, memory_percent=65)
    r = batch_allocatable(**{**base, **args})
    assert r.zero == reasons
    assert zero_reason(None, r, None) == ("; ".join(reasons) or None)


def test_why_the_formula_does_not_run() -> None:
    assert withheld(False, None, 0.0, 1.0, 15) == "colocation is off: no slo-controller-config ConfigMap (off by default)"
    assert withheld(False, "koordinator-system/slo-controller-config", 0.0, 1.0, 15) == (
        "colocation is disabled in slo-controller-config koordinator-system/slo-controller-config "
        "(colocation-config enable, for this node)")
    # An invalid ConfigMap is not one that disables colocation: the last good configuration (at start, the
    # defaults) is in force.
    assert withheld(False, "ns/cm", 0.0, 1.0, 15, invalid='colocation-config: enable: Input should be a valid '
                    'boolean (got "yes")') == (
        'colocation is off: slo-controller-config ns/cm is invalid (colocation-config: enable: Input should be a '
        'valid boolean (got "yes")) and the last good configuration, in force (the defaults if none was read), does '
        'not enable it')
    assert withheld(True, "ns/cm", None, 1.0, 15) == "no usage measured yet"
    assert withheld(True, "ns/cm", 0.0, 16 * 60.0, 15) == "usage data older than 15 minutes (degradeTimeMinutes)"
    assert withheld(True, "ns/cm", 0.0, 60.0, 15) is None
    assert zero_reason("no usage measured yet", None, "n1") == (
        "no usage measured yet; no Node object n1 found (this machine's capacity stands in; nothing is published)")


def test_batch_units_published_as_integers() -> None:
    # 50 cores -> batch-cpu 50000 (milli-cores), 50 GiB -> batch-memory 53687091200 (bytes).
    r = batch_allocatable(100000, 100 * GI, 0, 0, [], 50, 50)
    assert r.resources() == {BATCH_CPU: 50000, BATCH_MEMORY: 53687091200}
    published = {BATCH_CPU: "50000", BATCH_MEMORY: "53687091200"}
    assert status_patch(r.resources()) == {"status": {"capacity": published, "allocatable": published}}


def test_status_patch_bodies_match_recorded_requests() -> None:
    add = load_exchange("nodes-status-patch-smp-add-batch")["request"]["body"]
    remove = load_exchange("nodes-status-patch-smp-remove-batch-null")["request"]["body"]
    assert status_patch({BATCH_CPU: 25000, BATCH_MEMORY: 33000000000}) == add
    assert status_patch(None) == remove
    node = load_exchange("nodes-status-patch-smp-add-batch")["response"]["body"]
    assert published(node["status"]["allocatable"]) == {BATCH_CPU: 25000, BATCH_MEMORY: 33000000000}


@pytest.mark.parametrize("name,current,wanted,last,now,expected", [
    ("never published", {}, {BATCH_CPU: 1, BATCH_MEMORY: 1}, None, 0, True),
    ("first update by this agent", {BATCH_CPU: 100, BATCH_MEMORY: 100}, {BATCH_CPU: 100, BATCH_MEMORY: 100}, None, 0, True),
    ("small move: no", {BATCH_CPU: 100, BATCH_MEMORY: 100}, {BATCH_CPU: 110, BATCH_MEMORY: 91}, 0, 10, False),
    ("> 10%: yes", {BATCH_CPU: 100, BATCH_MEMORY: 100}, {BATCH_CPU: 111, BATCH_MEMORY: 100}, 0, 10, True),
    ("300 s passed (strictly more)", {BATCH_CPU: 100, BATCH_MEMORY: 100}, {BATCH_CPU: 100, BATCH_MEMORY: 100}, 0, 301, True),
    ("at 300 s: not yet", {BATCH_CPU: 100, BATCH_MEMORY: 100}, {BATCH_CPU: 100, BATCH_MEMORY: 100}, 0, 300, False),
    ("remove when present", {BATCH_CPU: 100}, None, 0, 1, True),
    ("remove when absent", {}, None, 0, 1, False),
])
def test_needs_update(name: str, current: dict[str, Any], wanted: dict[str, Any] | None, last: float | None, now: float, expected: bool) -> None:
    assert needs_update(current, wanted, last, now, 0.1, 300) is expected


def test_usage_window_averages_and_expires() -> None:
    w = UsageWindow(60)
    w.add(0, {"": (1000.0, 100), "p": (None, 10)})
    w.add(30, {"": (3000.0, 300), "p": (500.0, 30)})
    assert w.average("") == (2000.0, 200.0)
    assert w.average("p") == (500.0, 20.0)
    w.add(60, {"": (5000.0, 500)})            # the t=0 sample leaves the window
    assert w.average("") == (4000.0, 400.0)
    assert w.average("p") == (500.0, 30.0)
    w.add(200, {"": (1.0, 1)})
    assert w.average("p") == (None, None) and w.average("") == (1.0, 1.0)


@pytest.mark.parametrize("last,now,expected", [(None, 0, True), (0, 900, False), (0, 901, True)])
def test_degrade_after_15_minutes(last: float | None, now: float, expected: bool) -> None:
    assert degraded(last, now, 15) is expected


# -- today's pod API: a BE pod's sandbox overhead, pod-level resources, native sidecars (issue 27 §3) ----------
def _pod(name: str, be: bool, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: object) -> dict[str, Any]:
    labels = {"koordinator.sh/qosClass": "BE"} if be else {}
    return {"metadata": {"name": name, "uid": name, "labels": labels},
            "spec": {"containers": containers, "initContainers": init or [], **spec}}


def _c(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: object) -> dict[str, Any]:
    return {"name": name, "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}, **extra}


KATA_BE = _pod("kata-be", True, [_c("app", {BATCH_CPU: "2000", BATCH_MEMORY: "4Gi"})], runtimeClassName="kata",
               overhead={"cpu": "250m", "memory": "160Mi"})
HP_SIDECAR_POD_LEVEL = _pod("hp", False, [_c("app", {"cpu": "1"})], [_c("proxy", {"cpu": "500m"}, restartPolicy="Always")],
                            resources={"requests": {"memory": "2Gi"}})


@pytest.mark.parametrize("name,pods,policy,cpu,memory", [
    # The scheduler charges a BE pod's overhead to the node's native cpu/memory: batch lends only the rest.
    ("a BE pod's sandbox overhead is held natively", [KATA_BE], "usage", 5200 - 250, int(32 * GI * 0.65) - 160 * 2**20),
    ("... under memory policy request too", [KATA_BE], "request", 5200 - 250, int(32 * GI * 0.65) - 160 * 2**20),
    # An unmeasured non-BE pod counts its requests as PodRequests does: the sidecar beside the container (cpu
    # 1 + 0.5), the pod-level memory in place of the containers' (none).
    ("a non-BE pod's sidecar and pod-level request", [HP_SIDECAR_POD_LEVEL], "usage", 5200 - 1500,
     int(32 * GI * 0.65) - 2 * GI),
])
def test_batch_allocatable_reads_todays_pod_api(name: str, pods: list[dict[str, Any]], policy: str, cpu: int,
                                                memory: int) -> None:
    views = [pod_view(p) for p in pods]
    loads = [PodLoad(v.be, None, None, v.cpu_request_milli, v.memory_request, v.overhead_cpu_milli,
                     v.overhead_memory) for v in views]
    r = batch_allocatable(8000, 32 * GI, 0, 0, loads, 65, 65, policy)
    assert (r.cpu_milli, r.memory) == (cpu, memory)
