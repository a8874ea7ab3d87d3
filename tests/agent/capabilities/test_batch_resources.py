"""Batch resources published by the agent's cycle, against the replay server: what a real node showed (issue 40's
findings 1 to 3, docs/agent.md "Batch resources"): nothing published before a CPU rate is measured, never less
than the batch requests of the pods bound to the node, and the node status written at most once per
``metricReportIntervalSeconds``."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.agent_trees import write_proc
from harness.apiserver import ReplayAPIServer
from tests.agent.test_cycle import GI, NODE, _api, _state, write_node, write_state
from webhook.agent.cycle import Agent
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.collectors import Collector
from webhook.agent.options import AgentOptions
from webhook.cluster.state import ClusterState
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY

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
