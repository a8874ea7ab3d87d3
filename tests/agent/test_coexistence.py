"""Side by side with koordlet and koord-manager: each capability turned off removes exactly its own requests (on
the local replay API server) and cgroup writes; another writer of the node's batch values or of a BE cgroup file
is noticed, said once, counted, and not fought."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.agent_trees import tick_cpu, write_proc
from harness.apiserver import ReplayAPIServer
from tests.agent.test_cycle import GI, NODE, NS, _api, _state, recorded, write_node, write_state
from tests.events_api import EventsAPI
from webhook.agent.cycle import Agent
from webhook.agent.domain.coexistence import Capability, CapabilityError, node_status_overwritten, parse_disabled
from webhook.agent.domain.cpu_eviction import FEATURES as CPU_FEATURES
from webhook.agent.domain.thresholds import parse_thresholds
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.collectors import Collector
from webhook.agent.options import AgentOptions
from webhook.cluster.files import FilesSource

pytestmark = pytest.mark.usefixtures("restore_logging")

# Colocation on, the memory watermark at 70 % and BE CPU suppression by cfsQuota: every capability has work.
CONFIG = {
    "colocation-config": json.dumps({"enable": True, "metricAggregateDurationSeconds": 60,
                                     "cpuReclaimThresholdPercent": 60, "memoryReclaimThresholdPercent": 70}),
    "resource-threshold-config": json.dumps({"clusterStrategy": {
        "enable": True, "memoryEvictThresholdPercent": 70, "cpuSuppressPolicy": "cfsQuota",
        "cpuSuppressThresholdPercent": 65}}),
}
USAGE = {"be-batch-0": 3 * GI, "be-evict-ok": 3 * GI, "ls-web-0": 4 * GI}
WATERMARK_REASON, KUBELET_REASON = "EvictPodByNodeMemoryUsage", "Evicted"
BESTEFFORT = "kubepods.slice/kubepods-besteffort.slice"
STATUS = f"/api/v1/nodes/{NODE}/status"


def _routes(srv: ReplayAPIServer) -> None:
    """The recorded answers to what the agent asks: two Evictions, the node status patch."""
    srv.add_exchange("eviction-success", path=f"/api/v1/namespaces/{NS}/pods/be-batch-0/eviction")
    srv.add_exchange("eviction-success")
    srv.add_exchange("nodes-status-patch-smp-add-batch")


@pytest.fixture()
def srv() -> Iterator[ReplayAPIServer]:
    with ReplayAPIServer() as s:
        _routes(s)
        yield s


def _agent(tmp_path: Path, srv: ReplayAPIServer, disabled: frozenset[Capability] = frozenset()) -> Agent:
    state = _state(write_state(tmp_path / "state", cm_data=CONFIG))
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)             # 75 % of 32Gi: past the 70 % watermark
    thresholds = parse_thresholds(hard="memory.available<14Gi")  # 8Gi available: past the kubelet-style one too
    return Agent(AgentOptions(NODE, thresholds, enforce=True, disabled=disabled), Collector(proc, cg), state,
                 KubeActions(_api(srv), NODE))


def _cpu_moves(tmp_path: Path, seconds: int = 1) -> None:
    """/proc/stat a moment later: the node's CPU rate (2 CPUs, a tenth busy) can be measured."""
    write_proc(tmp_path / "proc", 32 * GI, 8 * GI, busy=1000 + 20 * seconds, idle=9000 + 180 * seconds)


def _footprint(tmp_path: Path, srv: ReplayAPIServer, disabled: frozenset[Capability]) -> dict[Capability, Any]:
    """What the agent asked of the API and wrote to cgroups over two cycles, by the capability it belongs to."""
    events = EventsAPI(srv, (NS,))
    agent = _agent(tmp_path, srv, disabled)
    first = agent.cycle(now=0.0).as_dict()
    _cpu_moves(tmp_path)
    outs = [first, agent.cycle(now=1.0).as_dict()]   # the second has a CPU rate: suppression acts
    evictions = [e for out in outs for e in out["evictions"]]
    writes = [(w["path"], w["file"], w["value"]) for out in outs for w in out["cgroupWrites"]]
    patches = [r.body["status"] for r in srv.requests_to("PATCH", STATUS)]
    posts = [r.path for r in srv.received if r.path.endswith("/eviction")]
    by_reason = {e["name"]: e["reason"] for e in evictions}
    assert sorted(posts) == sorted(f"/api/v1/namespaces/{NS}/pods/{n}/eviction" for n in by_reason)
    assert len(events.creates()) == len(evictions)     # one Event for each eviction made
    return {
        Capability.MEMORY_EVICTION: sorted(n for n, r in by_reason.items() if r == WATERMARK_REASON),
        Capability.KUBELET_EVICTION: sorted(n for n, r in by_reason.items() if r == KUBELET_REASON),
        Capability.BATCH_RESOURCES: [p for p in patches if "allocatable" in p],
        Capability.BE_CGROUP_LIMITS: [w for w in writes if w[0] != BESTEFFORT],
        Capability.CPU_SUPPRESS: [w for w in writes if w[0] == BESTEFFORT],
        Capability.CPU_EVICTION: sorted(n for n, r in by_reason.items() if r in CPU_FEATURES),
    }


def test_with_nothing_turned_off_every_capability_acts(tmp_path: Path, srv: ReplayAPIServer) -> None:
    full = _footprint(tmp_path, srv, frozenset())
    # CPU eviction waits out its 20 s cooldown from the start, as koordlet's does: two cycles a second apart
    # cannot evict (its own footprint: tests/agent/capabilities/test_cpu_eviction.py).
    assert all(v for c, v in full.items() if c is not Capability.CPU_EVICTION), \
        {c.value: v for c, v in full.items() if not v}


@pytest.mark.parametrize("off", list(Capability), ids=[c.value for c in Capability])
def test_each_switch_removes_exactly_its_own_writes_and_requests(tmp_path: Path, off: Capability) -> None:
    with ReplayAPIServer() as full_srv:
        _routes(full_srv)
        full = _footprint(tmp_path / "full", full_srv, frozenset())
    with ReplayAPIServer() as srv:
        _routes(srv)
        without = _footprint(tmp_path / "without", srv, frozenset({off}))
    assert without[off] == []
    for cap in Capability:
        if cap is off:
            continue
        if {cap, off} == {Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION}:
            # The two eviction triggers share the BE pods: with one off, the other may take a pod it shared.
            assert without[cap], cap
        else:
            assert without[cap] == full[cap], cap


def test_all_off_asks_nothing_and_writes_nothing(tmp_path: Path, srv: ReplayAPIServer) -> None:
    every = _footprint(tmp_path, srv, frozenset(Capability))
    assert not any(every.values())
    # with both evictions off, no BEMemoryPressure either: the recorded node carries none, so none is added
    assert [r for r in srv.received if r.method in ("POST", "PATCH") and "events" not in r.path] == []


EVICTION_OFF = frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION})


def test_both_evictions_off_claim_no_memory_pressure(tmp_path: Path, srv: ReplayAPIServer) -> None:
    """Past both thresholds, but neither eviction runs: the condition says Unknown, and goes on no node."""
    agent = _agent(tmp_path, srv, EVICTION_OFF)
    for i in range(3):
        out = agent.cycle(now=float(i)).as_dict()
        assert out["conditions"] == [{"type": "BEMemoryPressure", "status": "Unknown", "reason": "EvictionDisabled",
                                      "message": "memory-eviction and kubelet-eviction are disabled: the agent "
                                                 "handles no BE memory pressure"}]
    assert [r.body for r in srv.requests_to("PATCH", STATUS) if "conditions" in r.body["status"]] == []


@pytest.mark.parametrize("off", [EVICTION_OFF, frozenset({Capability.MEMORY_EVICTION})], ids=["both", "one"])
def test_a_condition_left_by_an_earlier_run_is_withdrawn_once(tmp_path: Path, srv: ReplayAPIServer,
                                                              off: frozenset[Capability]) -> None:
    agent = _agent(tmp_path, srv, off)
    node = recorded("nodes-get")
    node["status"]["conditions"].append({"type": "BEMemoryPressure", "status": "True",
                                         "reason": "BEMemoryThresholdMet", "message": "memory usage >= 70%"})
    (tmp_path / "state" / "node.json").write_text(json.dumps(node))
    assert agent.state is not None
    FilesSource(tmp_path / "state", agent.state).load()
    agent.cycle(now=0.0)
    agent.cycle(now=1.0)
    sent = [c for r in srv.requests_to("PATCH", STATUS) for c in r.body["status"].get("conditions", [])]
    if off == EVICTION_OFF:
        assert [(c["status"], c["reason"]) for c in sent] == [("Unknown", "EvictionDisabled")]
    else:  # one eviction still runs: the condition is still the agent's (True again: past the kubelet-style one)
        assert [c["reason"] for c in sent] != ["EvictionDisabled"] and all(c["status"] != "Unknown" for c in sent)


def test_another_writer_of_the_node_status_is_said_once_and_not_fought(
        tmp_path: Path, srv: ReplayAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """koord-manager's noderesource controller publishes its own batch values on the node between cycles."""
    agent = _agent(tmp_path, srv, frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION}))
    agent.cycle(now=0.0)
    tick_cpu(tmp_path / "proc")                                  # a second reading: a CPU rate
    agent.cycle(now=1.0)
    assert len(srv.requests_to("PATCH", STATUS)) >= 1           # the agent published
    published = [r.body for r in srv.requests_to("PATCH", STATUS) if "allocatable" in r.body["status"]]
    assert published
    node = recorded("nodes-get")
    theirs = {"kubernetes.io/batch-cpu": "7777", "kubernetes.io/batch-memory": "1234567890"}
    for key in ("capacity", "allocatable"):
        node["status"][key].update(theirs)
    (tmp_path / "state" / "node.json").write_text(json.dumps(node))
    assert agent.state is not None
    FilesSource(tmp_path / "state", agent.state).load()         # the watch brings the other writer's values
    before = len(published)
    for i in range(1, 40):                                       # well past koordinator's update time threshold
        agent.cycle(now=float(i * 10))
    published = [r.body for r in srv.requests_to("PATCH", STATUS) if "allocatable" in r.body["status"]]
    assert len(published) == before, "the agent wrote the batch values again: a write loop"
    warnings = [r.getMessage() for r in caplog.records if "another writer" in r.getMessage()]
    assert len(warnings) == 1 and "batch-resources" in warnings[0] and "7777" in warnings[0]
    assert "--disable=batch-resources" in warnings[0]
    assert agent.metrics.registry.get_sample_value("colocation_agent_other_writer",
                                                   {"capability": "batch-resources"}) == 1
    assert agent.metrics.registry.get_sample_value("colocation_agent_capability_enabled",
                                                   {"capability": "batch-resources"}) == 0
    off = agent.cycle(now=500.0).as_dict()["capabilitiesOff"]
    assert off["memory-eviction"] == off["kubelet-eviction"] == "disabled"
    assert off["batch-resources"].startswith("another writer: node colo-node-1 status now has")


def test_another_writer_of_the_be_cpu_quota_is_said_once_and_not_fought(
        tmp_path: Path, srv: ReplayAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """koordlet's BECPUSuppress sets the besteffort quota its own way."""
    agent = _agent(tmp_path, srv, frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION}))
    agent.cycle(now=0.0)
    _cpu_moves(tmp_path)
    written = [w for w in agent.cycle(now=1.0).as_dict()["cgroupWrites"] if w["path"] == BESTEFFORT]
    assert written
    cpu_max = tmp_path / "cgroup" / BESTEFFORT / "cpu.max"
    cpu_max.write_text("max 100000\n")                             # koordlet lifts it
    writes_after = []
    for i in range(2, 40):
        _cpu_moves(tmp_path, i)
        writes_after += agent.cycle(now=float(i)).as_dict()["cgroupWrites"]
    assert cpu_max.read_text() == "max 100000\n"
    assert [w for w in writes_after if w["path"] == BESTEFFORT] == []
    assert Capability.CPU_SUPPRESS in agent.yielded and Capability.BE_CGROUP_LIMITS not in agent.yielded
    warnings = [r.getMessage() for r in caplog.records if "another writer" in r.getMessage()]
    assert len(warnings) == 1 and "cpu-suppress" in warnings[0] and "cpu.max" in warnings[0]


def test_the_agents_own_patch_seen_late_is_no_other_writer() -> None:
    older, ours = {"kubernetes.io/batch-cpu": 4000}, {"kubernetes.io/batch-cpu": 5000}
    assert not node_status_overwritten({}, {}, [ours])                 # the watch has not brought it yet
    assert not node_status_overwritten({}, ours, [ours])               # now it has
    assert not node_status_overwritten({}, older, [older, ours])       # two writes in a row, the first seen late
    assert not node_status_overwritten(None, {"kubernetes.io/batch-cpu": 1}, [ours])   # nothing seen before
    assert not node_status_overwritten({}, {"kubernetes.io/batch-cpu": 1}, [])         # the agent wrote nothing
    assert node_status_overwritten(ours, {"kubernetes.io/batch-cpu": 1}, [older, ours])


def test_disable_names_are_checked() -> None:
    assert parse_disabled(["", "cpu-suppress,be-cgroup-limits", "cpu-suppress"]) == {
        Capability.CPU_SUPPRESS, Capability.BE_CGROUP_LIMITS}
    with pytest.raises(CapabilityError, match="unknown capability 'cpu-supress'; the capabilities are "
                                              "memory-eviction, kubelet-eviction, batch-resources"):
        parse_disabled(["cpu-supress"])
