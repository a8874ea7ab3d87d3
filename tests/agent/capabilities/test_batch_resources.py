"""Batch resources published by the agent's cycle, against the replay server: what a real node showed (issue 40's
findings 1 to 3, docs/agent.md "Batch resources"): nothing published before a CPU rate is measured, never less
than the batch requests of the pods bound to the node, and the node status written at most once per
``metricReportIntervalSeconds``."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from harness.agent_trees import write_proc
from harness.apiserver import ReplayAPIServer
from tests.agent.test_cycle import GI, NODE, _api, _state, write_node, write_state
from webhook.agent.capabilities.batch_resources import BatchDecision, BatchResources
from webhook.agent.capabilities.contract import Readings
from webhook.agent.coexistence import Coexistence
from webhook.agent.cycle import Agent
from webhook.agent.domain.batch_allocatable import needs_update, status_patch
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.sample import PodUsage, Sample
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.collectors import Collector
from webhook.agent.inputs import Inputs, PodView, pod_view
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cluster.state import ClusterState
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY

pytestmark = pytest.mark.usefixtures("restore_logging")
STATUS = f"/api/v1/nodes/{NODE}/status"
COLOCATION = {"enable": True, "metricAggregateDurationSeconds": 10, "cpuReclaimThresholdPercent": 60,
              "memoryReclaimThresholdPercent": 70}


@pytest.fixture()
def srv() -> Iterator[ReplayAPIServer]:
    with ReplayAPIServer() as s:
        s.add_exchange("nodes-status-patch-smp-add-batch")
        yield s


def _agent(tmp_path: Path, srv: ReplayAPIServer, colocation: dict[str, Any] | None = None,
           used: int = 8 * GI) -> tuple[Agent, ClusterState, Path]:
    data = {"colocation-config": json.dumps(colocation or COLOCATION)}
    state = _state(write_state(tmp_path / "state", cm_data=data))
    proc, cg = write_node(tmp_path, used, {})
    return Agent(AgentOptions(NODE), Collector(proc, cg), state, KubeActions(_api(srv), NODE)), state, proc


def _batch_patches(srv: ReplayAPIServer) -> list[dict[str, Any]]:
    return [r.body["status"]["allocatable"] for r in srv.requests_to("PATCH", STATUS)
            if "allocatable" in r.body["status"]]


def _ticks(proc: Path, busy: int, idle: int, used: int = 8 * GI) -> None:
    write_proc(proc, 32 * GI, 32 * GI - used, busy=busy, idle=idle)


def _as_watched(state: ClusterState, allocatable: dict[str, Any]) -> None:
    """What the watch brings back after a status patch: the node with the values written."""
    node = copy.deepcopy(state.node(NODE))
    assert node is not None
    for key in ("capacity", "allocatable"):
        node["status"][key].update(allocatable)
    state.upsert("Node", node)


def _finish(state: ClusterState, keep: tuple[str, ...] = ("ls-web-0",)) -> None:
    """Every pod on the node but ``keep`` Succeeded: it no longer counts, nor holds batch requests."""
    for pod in list(state.pods_on_node(NODE)):
        if pod["metadata"]["name"] not in keep:
            done = copy.deepcopy(pod)
            done["status"]["phase"] = "Succeeded"
            state.upsert("Pod", done)


def test_nothing_is_published_before_a_cpu_rate_is_measured(tmp_path: Path, srv: ReplayAPIServer) -> None:
    """The first sample has no CPU rate: counting it as 0 published far more batch-cpu than the node had free
    (1950 then 940 a second later on a real node)."""
    agent, _, proc = _agent(tmp_path, srv)
    first = agent.cycle(now=0.0).as_dict()
    assert _batch_patches(srv) == []
    assert first["batchReason"] == ("no CPU usage rate measured yet (a rate needs two samples): the node's values "
                                    "are left as they are")
    _ticks(proc, busy=1000 + 6000, idle=9000 + 2000)      # 6 of 8 cores busy over the second: 6 of 2 CPUs here
    second = agent.cycle(now=1.0).as_dict()
    (published,) = _batch_patches(srv)
    assert second["batchReason"] is None or "held at" in second["batchReason"]
    assert int(published[BATCH_CPU]) == second["batch"][BATCH_CPU]


def test_values_already_published_stay_while_nothing_is_measured(tmp_path: Path, srv: ReplayAPIServer) -> None:
    """An agent restarting on a node whose status an earlier run wrote: no write (and no removal) until it has
    measured a rate."""
    agent, state, _ = _agent(tmp_path, srv)
    _as_watched(state, {BATCH_CPU: "1300", BATCH_MEMORY: str(9 * GI)})
    out = agent.cycle(now=0.0).as_dict()
    assert srv.requests_to("PATCH", STATUS) == [] or _batch_patches(srv) == []
    assert out["batch"] == {BATCH_CPU: 1300, BATCH_MEMORY: 9 * GI}


def test_never_less_than_the_bound_pods_request(tmp_path: Path, srv: ReplayAPIServer) -> None:
    """A kubelet restart admits its pods again against the allocatable of that moment; the four BE pods bound to the
    node request 4000 batch-cpu and 8Gi batch-memory, and a node this busy leaves the formula far below that."""
    used = 28 * GI
    agent, _, proc = _agent(tmp_path, srv, used=used)
    _ticks(proc, busy=1000, idle=9000, used=used)
    agent.cycle(now=0.0)
    _ticks(proc, busy=1000 + 180, idle=9000 + 20, used=used)        # the node 90 % busy
    out = agent.cycle(now=1.0).as_dict()
    (published,) = _batch_patches(srv)
    assert (int(published[BATCH_CPU]), int(published[BATCH_MEMORY])) == (4000, 8 * GI)
    assert out["batch"] == {BATCH_CPU: 4000, BATCH_MEMORY: 8 * GI}
    reason = out["batchReason"]
    assert f"{BATCH_CPU} held at 4000 (the requests of the pods bound to the node) above " in reason
    assert f"{BATCH_MEMORY} held at {8 * GI}" in reason


def test_finished_pods_do_not_hold_the_floor(tmp_path: Path, srv: ReplayAPIServer) -> None:
    used = 28 * GI
    agent, state, proc = _agent(tmp_path, srv, used=used)
    _finish(state, keep=("ls-web-0", "be-batch-0"))        # be-batch-0: 2000 batch-cpu, 4Gi, the only BE one left
    _ticks(proc, busy=1000, idle=9000, used=used)
    agent.cycle(now=0.0)
    _ticks(proc, busy=1000 + 180, idle=9000 + 20, used=used)
    agent.cycle(now=1.0)
    (published,) = _batch_patches(srv)
    assert (int(published[BATCH_CPU]), int(published[BATCH_MEMORY])) == (2000, 4 * GI)


def _writes(srv: ReplayAPIServer, agent: Agent, state: ClusterState, proc: Path, loads: list[int]) -> int:
    """One 1 s cycle per per-cent load of the 2 CPUs (4Gi used), each write watched back onto the node; how many
    batch writes were made."""
    busy, idle = 1000, 9000
    seen = 0
    for t, load in enumerate(loads):
        busy, idle = busy + 2 * load, idle + 2 * (100 - load)
        _ticks(proc, busy, idle, used=4 * GI)
        agent.cycle(now=float(t))
        patches = _batch_patches(srv)
        if len(patches) > seen:
            _as_watched(state, patches[-1])
            seen = len(patches)
    return seen


def test_the_status_is_written_at_most_once_per_report_interval(tmp_path: Path, srv: ReplayAPIServer) -> None:
    """Ten minutes of 1 s cycles with usage jumping by ±25 % around a steady load: a value moving by more than
    ``resourceDiffThreshold`` is written once per ``metricReportIntervalSeconds`` (60 s) at the most, as
    koord-manager writes once per NodeMetric report; a real node saw 27 writes a minute (36 here without it)."""
    agent, state, proc = _agent(tmp_path, srv, used=4 * GI)
    _finish(state)                         # no BE pod bound: nothing holds the values up
    rng = random.Random(40)
    writes = _writes(srv, agent, state, proc, [rng.choice((30, 70)) for _ in range(600)])
    assert 2 <= writes <= 11, writes


def test_a_smaller_report_interval_writes_more_often(tmp_path: Path, srv: ReplayAPIServer) -> None:
    agent, state, proc = _agent(tmp_path, srv, {**COLOCATION, "metricReportIntervalSeconds": 5}, used=4 * GI)
    _finish(state)
    assert _writes(srv, agent, state, proc, [20 if t % 20 < 10 else 80 for t in range(120)]) > 120 // 60 + 1


@pytest.mark.parametrize("colocation", [{**COLOCATION, "enable": False}, None])
def test_withdrawn_is_what_the_bound_pods_request_and_removed_only_without_them(
        tmp_path: Path, srv: ReplayAPIServer, colocation: dict[str, Any] | None) -> None:
    """Colocation disabled (or the ConfigMap gone) while BE pods run: the values fall to what they request, so a
    kubelet restart keeps them, and no new batch pod fits; with none of them left, the values are removed."""
    agent, state, proc = _agent(tmp_path, srv, colocation)
    if colocation is None:
        cm = state.config_map("koordinator-system", "slo-controller-config")
        assert cm is not None
        state.delete("ConfigMap", cm)
    _as_watched(state, {BATCH_CPU: "6000", BATCH_MEMORY: str(12 * GI)})
    agent.cycle(now=0.0)
    _ticks(proc, busy=1100, idle=9100)
    agent.cycle(now=1.0)
    assert [(int(p[BATCH_CPU]), int(p[BATCH_MEMORY])) for p in _batch_patches(srv)] == [(4000, 8 * GI)]
    _as_watched(state, {BATCH_CPU: "4000", BATCH_MEMORY: str(8 * GI)})
    _finish(state)
    _ticks(proc, busy=1200, idle=9200)
    agent.cycle(now=2.0)
    last = srv.requests_to("PATCH", STATUS)[-1].body["status"]["allocatable"]
    assert last == {BATCH_CPU: None, BATCH_MEMORY: None}


# -- mid resources, decided from hand-made Readings ----------------------------------------------------------------
def _pod(uid: str, priority_class: str, requests: dict[str, str], qos: str | None = None) -> PodView:
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    return pod_view({"metadata": {"uid": uid, "name": uid, "namespace": "ns", "labels": labels},
                     "spec": {"priorityClassName": priority_class, "priority": PRIORITY[priority_class],
                              "containers": [{"name": "c", "resources": {"requests": requests}}]},
                     "status": {"phase": "Running"}})


PRIORITY = {"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000}
MID_NODE: dict[str, Any] = {"metadata": {"name": NODE, "labels": {}},
            "status": {"capacity": {"cpu": "4", "memory": str(16 * GI)},
                       "allocatable": {"cpu": "4", "memory": str(16 * GI)}}}


def _mid_readings(now: float, colocation: Colocation, pods: list[PodView], busy_milli: float,
                  node: dict[str, Any] | None = None) -> Readings:
    inputs = Inputs(node or MID_NODE, pods, True, colocation, MemoryEvict(), CPUSuppress())
    usage = {p.uid: PodUsage(500.0, GI) for p in pods}
    return Readings(now, inputs, None, sample=Sample(now, 16 * GI, 12 * GI, 4, busy_milli, usage))


def _mid_decide(colocation: Colocation, pods: list[PodView], node: dict[str, Any] | None = None,
                disabled: frozenset[Capability] = frozenset()) -> BatchDecision:
    metrics = AgentMetrics()
    cap = BatchResources(AgentOptions(NODE), Coexistence(disabled, metrics), None, metrics)
    cap.decide(_mid_readings(0.0, colocation, pods, 2000.0, node))
    return cap.decide(_mid_readings(1.0, colocation, pods, 2000.0, node))


MID_ON = Colocation(enable=True, metricAggregateDurationSeconds=10)


def test_mid_is_decided_with_batch_from_what_was_measured() -> None:
    """A prod pod of 2 cores / 4Gi using 0.5 / 1Gi; the node 2 cores / 4Gi used: system 1.5 cores / 3Gi. Prod
    reclaimable: by pod 2000 − 550 = 1450, by band max(2000 − (1500 + 500) × 1.1, 0) = 0; memory by pod
    4Gi − 1.1Gi, by band 4Gi − 4.4Gi < 0: so 0 from it, and midUnallocatedPercent 50 of
    4000 − max(0, 1500) − 2000 = 500 cores and 16Gi − 3Gi − 4Gi = 9Gi."""
    prod = _pod("p", "koord-prod", {"cpu": "2", "memory": str(4 * GI)})
    decision = _mid_decide(dataclasses.replace(MID_ON, midUnallocatedPercent=50), [prod])
    assert {k: decision.values[k] for k in (MID_CPU, MID_MEMORY)} == {MID_CPU: 250, MID_MEMORY: 9 * GI // 2}
    assert decision.wanted is not None and set(decision.wanted) == {BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY}
    assert decision.mid_reason is None
    zero = _mid_decide(MID_ON, [prod])       # the defaults: nothing of the unallocated part
    assert (zero.values[MID_CPU], zero.values[MID_MEMORY]) == (0, 0)
    assert zero.mid_reason is not None and zero.mid_reason.startswith("midAllocatable[CPU(milli-core)]:0 = ")


def test_mid_in_static_mode_and_the_nodes_ratio_label() -> None:
    static = dataclasses.replace(MID_ON, midReclaimMode="static", midStaticCPUReservedPercent=25,
                                 midStaticMemoryReservedPercent=10, midMemoryThresholdPercent=5)
    decision = _mid_decide(static, [])
    assert (decision.values[MID_CPU], decision.values[MID_MEMORY]) == (1000, 16 * GI * 5 // 100)
    labelled = copy.deepcopy(MID_NODE)
    labelled["metadata"]["labels"] = {"node.koordinator.sh/mid-static-cpu-reserved-ratio": "oops"}
    ignored = _mid_decide(static, [], labelled)
    assert ignored.mid_reason == ("node label node.koordinator.sh/mid-static-cpu-reserved-ratio='oops' is ignored: "
                                  "not a ratio >= 0 (as koord-manager ignores it)")


def test_mid_is_never_less_than_the_bound_mid_pods_request() -> None:
    """The kubelet admits mid pods again against mid allocatable on a restart, as batch ones."""
    mid = _pod("m", "koord-mid", {MID_CPU: "1500", MID_MEMORY: str(2 * GI)})
    decision = _mid_decide(MID_ON, [mid])
    assert (decision.values[MID_CPU], decision.values[MID_MEMORY]) == (1500, 2 * GI)
    assert decision.mid_reason is not None
    assert f"{MID_CPU} held at 1500 (the requests of the pods bound to the node) above 0" in decision.mid_reason
    assert decision.reason is None or MID_CPU not in decision.reason
    # Withdrawn (colocation off): mid is kept at what its pods request, batch (none requested) removed.
    off = _mid_decide(Colocation(), [mid])
    assert off.wanted == {MID_CPU: 1500, MID_MEMORY: 2 * GI}


def test_mid_is_off_with_batch_resources_beside_koord_manager() -> None:
    decision = _mid_decide(MID_ON, [], disabled=frozenset({Capability.BATCH_RESOURCES}))
    assert decision == BatchDecision({}, None, None)


def test_the_patch_carries_mid_with_batch_and_removes_only_what_is_on_the_node() -> None:
    wanted = {BATCH_CPU: 1000, BATCH_MEMORY: GI, MID_CPU: 300, MID_MEMORY: 0}
    body = status_patch(wanted, {BATCH_CPU: 900, BATCH_MEMORY: GI})
    values = {BATCH_CPU: "1000", BATCH_MEMORY: str(GI), MID_CPU: "300", MID_MEMORY: "0"}
    assert body == {"status": {"capacity": values, "allocatable": values}}
    removed = status_patch({MID_CPU: 300, MID_MEMORY: 0}, {BATCH_CPU: 900, BATCH_MEMORY: GI, MID_CPU: 300})
    assert removed["status"] == {k: {BATCH_CPU: None, BATCH_MEMORY: None, MID_CPU: "300", MID_MEMORY: "0"}
                                 for k in ("capacity", "allocatable")}
    # A value on the node that is no longer wanted is removed at once, as a missing one is written at once.
    assert needs_update({BATCH_CPU: 900, MID_CPU: 300}, {MID_CPU: 300}, 0.0, 1.0, 0.1, 300, 60)
    assert not needs_update({MID_CPU: 300}, {MID_CPU: 310}, 0.0, 1.0, 0.1, 300, 60)


def test_the_mid_values_reach_the_report_and_the_gauges(tmp_path: Path, srv: ReplayAPIServer) -> None:
    agent, _, proc = _agent(tmp_path, srv, {**COLOCATION, "midReclaimMode": "static",
                                            "midStaticCPUReservedPercent": 10, "midStaticMemoryReservedPercent": 10})
    agent.cycle(now=0.0)
    _ticks(proc, busy=1100, idle=9100)
    out = agent.cycle(now=1.0).as_dict()
    (patch,) = _batch_patches(srv)
    assert set(out["mid"]) == {MID_CPU, MID_MEMORY} and out["mid"][MID_CPU] > 0
    assert {k: int(patch[k]) for k in (MID_CPU, MID_MEMORY)} == out["mid"]
    text = generate_latest(agent.metrics.registry).decode()
    assert (f'koordlet_node_resource_allocatable{{node="{NODE}",resource="{MID_CPU}",unit="integer"}} '
            f'{float(out["mid"][MID_CPU])}') in text
