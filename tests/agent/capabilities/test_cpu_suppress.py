"""CPU suppression's policies: the one in force suppresses, the others recover once; the cpuset policy through
the agent's cycle on fake cgroup v1 and v2 trees and a fake sysfs (which folders get which CPUs in what order, the
quota recovered, the fallback to cfsQuota, recovery, the metric, the report, another writer)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from harness.agent_trees import write_cpuset_v1, write_cpuset_v2, write_proc, write_sysfs
from tests.agent.edges.test_cgroups import fakes, tree
from tests.agent.test_cycle import GI, write_state
from tests.agent.test_cycle import NODE as RECORDED_NODE
from webhook.agent.capabilities.contract import CgroupReadings, Readings
from webhook.agent.capabilities.cpu_suppress import CpuSuppress, Node, SuppressTarget
from webhook.agent.cycle import Agent
from webhook.agent.domain.cgroup_limits import UNLIMITED, CgroupWrite, Current
from webhook.agent.domain.cpu_suppress import BE_MIN_QUOTA, CFS_QUOTA_POLICY
from webhook.agent.domain.cpuset import CPUSET_POLICY
from webhook.agent.domain.sample import Layout, PodUsage, Sample
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.edges.collectors import Collector
from webhook.agent.inputs import Inputs, pod_view
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cluster.files import FilesSource
from webhook.cluster.state import AGENT_KINDS, ClusterState

NODE = "n1"
TIER = "kubepods/besteffort"
PERIOD = 100000
LS = {"metadata": {"uid": "ls-0"},
      "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


def _inputs(cfg: CPUSuppress) -> Inputs:
    return Inputs(None, [pod_view(LS)], False, Colocation(), MemoryEvict(), cfg)


def _sample(node_cpu_milli: float | None, ls_milli: float) -> Sample:
    return Sample(0.0, 8 << 30, 4 << 30, 4, node_cpu_milli, {"ls-0": PodUsage(ls_milli, None)})


def _readings(sample: Sample, inputs: Inputs, tier: Current) -> Readings:
    """What the cycle hands suppression: the sample and the tier's quota (no cpuset folders read)."""
    cgroups = CgroupReadings(Layout(1, "cgroupfs", "kubepods", "kubepods"), 4096, True, tier=(TIER, tier))
    return Readings(0.0, inputs, None, sample=sample, cgroups=cgroups)


def _recorded(suppress: CpuSuppress, target: SuppressTarget, tier: Current, cfg: CPUSuppress) -> None:
    writes = [CgroupWrite(TIER, "cpu.cfs_quota_us", str(target.quota))] if target.quota is not None else []
    suppress.record(TIER, tier, target, writes, {(TIER, "cpu.cfs_quota_us")}, False, cfg)


def test_cfs_quota_in_force_gives_the_tier_what_ls_leaves() -> None:
    metrics = AgentMetrics()
    suppress = CpuSuppress(NODE, metrics)
    cfg = CPUSuppress(enable=True, cpuSuppressThresholdPercent=65, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    tier = Current(quota=UNLIMITED, period=PERIOD)
    assert suppress.in_force(cfg, Node(_sample(1500.0, 1000.0), _inputs(cfg))) is suppress.policies[CFS_QUOTA_POLICY]
    # 4 cores × 65 % = 2600 − ls-0 1000 − system (1500 − 1000) = 1100 m -> 110000 µs per 100000.
    target = suppress.decide(_readings(_sample(1500.0, 1000.0), _inputs(cfg), tier))
    assert target == SuppressTarget(quota=110000)
    _recorded(suppress, target, tier, cfg)
    assert metrics.registry.get_sample_value("koordlet_be_suppress_cpu_cores",
                                             {"node": NODE, "type": CFS_QUOTA_POLICY}) == 1.1
    assert metrics.registry.get_sample_value("koordlet_be_suppress_ls_used_cpu_cores", {"node": NODE}) == 1.0


def test_without_a_cpu_rate_nothing_is_written() -> None:
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    target = CpuSuppress(NODE, AgentMetrics()).decide(_readings(_sample(None, 0.0), _inputs(cfg),
                                                      Current(quota=UNLIMITED, period=PERIOD)))
    assert not target.writes


def test_the_floor_holds_when_ls_takes_everything() -> None:
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    target = CpuSuppress(NODE, AgentMetrics()).decide(_readings(_sample(4000.0, 4000.0), _inputs(cfg),
                                                      Current(quota=UNLIMITED, period=PERIOD)))
    assert target.quota == BE_MIN_QUOTA


# With cpuset in force, the quota is recovered too: test_v1_be_folders_get_four_cpus_children_first_and_a_left_quota_goes.
@pytest.mark.parametrize("cfg", [CPUSuppress(enable=False, cpuSuppressPolicy=CFS_QUOTA_POLICY),
                                 CPUSuppress(enable=False, cpuSuppressPolicy=CPUSET_POLICY)],
                         ids=["suppression off", "suppression off, cpuset"])
def test_a_quota_left_on_the_tier_is_recovered_once(cfg: CPUSuppress) -> None:
    suppress = CpuSuppress(NODE, AgentMetrics())
    tier = Current(quota=300000, period=PERIOD)
    first = suppress.decide(_readings(_sample(1500.0, 1000.0), _inputs(cfg), tier))
    assert first == SuppressTarget(quota=UNLIMITED)
    _recorded(suppress, first, tier, cfg)
    # Recovered: someone setting a quota again is not undone (koordlet recovers once, too).
    assert not suppress.decide(_readings(_sample(1500.0, 1000.0), _inputs(cfg), tier)).writes


def test_an_unlimited_tier_needs_no_recovery() -> None:
    cfg = CPUSuppress(enable=False)
    assert not CpuSuppress(NODE, AgentMetrics()).decide(_readings(_sample(1500.0, 1000.0), _inputs(cfg),
                                                        Current(quota=UNLIMITED, period=PERIOD))).writes


def test_cpuset_without_a_cgroup_tree_says_once_that_cfs_quota_stands_in(caplog: pytest.LogCaptureFixture) -> None:
    suppress = CpuSuppress(NODE, AgentMetrics())
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CPUSET_POLICY)
    with caplog.at_level(logging.INFO, "colocation-agent"):
        targets = [suppress.decide(_readings(_sample(1500.0, 1000.0), _inputs(cfg), Current(quota=UNLIMITED, period=PERIOD)))
                   for _ in range(3)]
    said = [r.getMessage() for r in caplog.records if "cpuset" in r.getMessage()]
    assert said == ["cpuSuppressPolicy cpuset cannot act: no kubepods cgroup tree; suppressing BE CPU with cfsQuota "
                    "instead (docs/agent.md, BE CPU suppression)"]
    assert targets[0] == SuppressTarget(quota=110000)
    assert suppress.fallback == "no kubepods cgroup tree"


def test_an_unreadable_quota_is_left_alone() -> None:
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    assert not CpuSuppress(NODE, AgentMetrics()).decide(_readings(_sample(1500.0, 1000.0), _inputs(cfg),
                                                        Current(quota=None, period=PERIOD))).writes


# -- the cpuset policy through the cycle ------------------------------------------------------------------------
LS_UID = "7689fea4-a4f5-428a-b56b-bbfba219d730"     # ls-web-0 of the recorded pods
# The recorded node has 8 CPUs: here one socket, cores 0-3, cpu i and i + 4 their two threads.
CPUS = [(c, c % 4, 0, 0) for c in range(8)]


def state_for(tmp: Path, policy: str | None, enable: bool = True, percent: int = 65) -> ClusterState:
    strategy: dict[str, Any] = {"enable": enable, "cpuSuppressThresholdPercent": percent}
    if policy is not None:
        strategy["cpuSuppressPolicy"] = policy
    folder = write_state(tmp / "state", cm_data={"resource-threshold-config": json.dumps(
        {"clusterStrategy": strategy})})
    state = ClusterState(AGENT_KINDS)
    FilesSource(folder, state).load()
    return state


def agent_on(tmp: Path, state: ClusterState, cg: Path, metrics: AgentMetrics | None = None) -> Agent:
    proc = write_proc(tmp / "proc", 32 * GI, 24 * GI, busy=1000, idle=9000, cpus=2)
    return Agent(AgentOptions(RECORDED_NODE, enforce=True, sys_root=write_sysfs(tmp / "sys", CPUS)), Collector(proc, cg),
                 state, metrics=metrics)


def busy_cycle(agent: Agent, tmp: Path, cg: Path, ls: Path, second: int = 1) -> dict[str, Any]:
    """``second`` s after a first cycle, the node 600 m busier over 2 CPUs and ls-web-0 at 500 m (each second):
    the budget is 8 cores × 65 % − 500 − (1200 − 500) = 4000 m, so 4 CPUs."""
    write_proc(tmp / "proc", 32 * GI, 24 * GI, busy=1000 + 600 * second, idle=9000 + 400 * second, cpus=2)
    ls.write_text(f"usage_usec {500000 * second}\n" if ls.name == "cpu.stat" else f"{500000000 * second}\n")
    return agent.cycle(now=10.0 + second).as_dict()


def ls_cpu_file(cg: Path, version: int) -> Path:
    rel = f"kubepods/pod{LS_UID}"
    return cg / (f"{rel}/cpu.stat" if version == 2 else f"cpuacct/{rel}/cpuacct.usage")


def cpuset_writes(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(w["path"], w["value"]) for w in out["cgroupWrites"] if w["file"] == "cpuset.cpus"]


def v1_cpuset_tree(tmp: Path, cpus: str = "0-7") -> tuple[Path, list[str]]:
    cg = tree(tmp, 1, "cgroupfs")
    made = write_cpuset_v1(cg, fakes(), "cgroupfs", cpus)
    return cg, [str(p.relative_to(cg)) for p in made]


def test_v1_be_folders_get_four_cpus_children_first_and_a_left_quota_goes(tmp_path: Path) -> None:
    cg, folders = v1_cpuset_tree(tmp_path)
    quota = cg / "cpu/kubepods/besteffort/cpu.cfs_quota_us"
    quota.write_text("300000\n")                                   # left by an earlier cfsQuota suppression
    metrics = AgentMetrics()
    agent = agent_on(tmp_path, state_for(tmp_path, "cpuset"), cg, metrics)
    first = agent.cycle(now=10.0).as_dict()
    assert {"path": "cpu/kubepods/besteffort", "file": "cpu.cfs_quota_us", "value": "-1"} in first["cgroupWrites"]
    assert cpuset_writes(first) == []                               # no CPU rate yet: no budget
    assert first["cpuSuppress"] == {"policy": "cpuset", "beCPUs": "0-7", "cores": 8.0, "fallback": None,
                                   "reason": None}
    out = busy_cycle(agent, tmp_path, cg, ls_cpu_file(cg, 1))
    # the pairs of cores 0 and 1; every folder, containers first, the tier last
    assert cpuset_writes(out) == [(f, "0-1,4-5") for f in reversed(folders)]
    assert folders[0] == "cpuset/kubepods/besteffort" and len(folders) == 1 + 2 * 4   # tier, 4 BE pods, a container each
    assert {(cg / f / "cpuset.cpus").read_text() for f in folders} == {"0-1,4-5"}
    assert out["cpuSuppress"] == {"policy": "cpuset", "beCPUs": "0-1,4-5", "cores": 4.0, "fallback": None,
                                  "reason": None}
    assert metrics.suppress_cores.labels(RECORDED_NODE, "cpuset")._value.get() == 4.0
    assert 'type="cfsQuota"' not in generate_latest(metrics.registry).decode()    # only the policy in force
    assert quota.read_text() == "-1"
    again = busy_cycle(agent, tmp_path, cg, ls_cpu_file(cg, 1), second=2)
    assert again["cpuSuppress"]["beCPUs"] == "0-1,4-5"
    assert cpuset_writes(again) == []                               # the same budget: nothing to write again


def test_v2_the_union_goes_down_then_the_set_up(tmp_path: Path) -> None:
    cg = tree(tmp_path, 2, "cgroupfs")
    made = [str(p.relative_to(cg)) for p in write_cpuset_v2(cg, fakes(), "cgroupfs", "0-7")]
    agent = agent_on(tmp_path, state_for(tmp_path, None), cg)       # cpuset: the default policy
    agent.cycle(now=10.0)
    out = busy_cycle(agent, tmp_path, cg, ls_cpu_file(cg, 2))
    # cpuset.cpus is empty (the parent's, 0-7 effective): written explicitly down first, then narrowed up
    assert cpuset_writes(out) == [(f, "0-7") for f in made] + [(f, "0-1,4-5") for f in reversed(made)]
    assert out["cpuSuppress"]["beCPUs"] == "0-1,4-5"


def test_v2_without_the_cpuset_controller_falls_back_to_cfs_quota_and_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cg = tree(tmp_path, 2, "systemd")
    write_cpuset_v2(cg, fakes(), "systemd", tier_enabled=False)
    metrics = AgentMetrics()
    agent = agent_on(tmp_path, state_for(tmp_path, "cpuset"), cg, metrics)
    with caplog.at_level(logging.INFO, "colocation-agent"):
        agent.cycle(now=10.0)
        ls = cg / f"kubepods.slice/kubepods-pod{LS_UID.replace('-', '_')}.slice/cpu.stat"
        out = busy_cycle(agent, tmp_path, cg, ls)
    said = [r.getMessage() for r in caplog.records if "cannot act" in r.getMessage()]
    assert said == ["cpuSuppressPolicy cpuset cannot act: cgroup v2: the cpuset controller is not enabled for "
                    "kubepods.slice/kubepods-besteffort.slice (kubepods.slice/kubepods-besteffort.slice/"
                    "cgroup.controllers has no cpuset: kubepods.slice/cgroup.subtree_control lacks it); "
                    "suppressing BE CPU with cfsQuota instead (docs/agent.md, BE CPU suppression)"]
    assert out["cgroupWrites"] == [{"path": "kubepods.slice/kubepods-besteffort.slice", "file": "cpu.max",
                                    "value": "400000 100000"}]
    assert out["cpuSuppress"]["policy"] == "cfsQuota" and out["cpuSuppress"]["cores"] == 4.0
    assert out["cpuSuppress"]["fallback"].startswith("cgroup v2: the cpuset controller is not enabled")
    assert metrics.suppress_cores.labels(RECORDED_NODE, "cfsQuota")._value.get() == 4.0
    assert 'type="cpuset"' not in generate_latest(metrics.registry).decode()


@pytest.mark.parametrize(("policy", "enable"), [("cfsQuota", True), ("cpuset", False)])
def test_every_cpu_be_may_use_comes_back_once_tier_first(tmp_path: Path, policy: str, enable: bool) -> None:
    cg, folders = v1_cpuset_tree(tmp_path, "0-1,4-5")               # an earlier cpuset suppression
    agent = agent_on(tmp_path, state_for(tmp_path, policy, enable), cg)
    out = agent.cycle(now=10.0).as_dict()
    assert cpuset_writes(out) == [(f, "0-7") for f in folders]
    assert out["cpuSuppress"]["policy"] == (policy if enable else None)
    (cg / folders[-1] / "cpuset.cpus").write_text("3\n")             # someone else's now: recovered only once
    assert cpuset_writes(agent.cycle(now=11.0).as_dict()) == []


def test_reserved_cpus_never_come_back(tmp_path: Path) -> None:
    cg, folders = v1_cpuset_tree(tmp_path)
    state = state_for(tmp_path, "cfsQuota")
    node = state.node(RECORDED_NODE)
    assert node is not None
    node["metadata"].setdefault("annotations", {})["node.koordinator.sh/reservation"] = json.dumps(
        {"reservedCPUs": "0,4"})
    out = agent_on(tmp_path, state, cg).cycle(now=10.0).as_dict()
    assert cpuset_writes(out) == [(f, "1-3,5-7") for f in reversed(folders)]


def test_another_writer_of_the_cpusets_takes_the_capability(tmp_path: Path) -> None:
    cg, folders = v1_cpuset_tree(tmp_path)
    agent = agent_on(tmp_path, state_for(tmp_path, "cpuset"), cg)
    agent.cycle(now=10.0)
    busy_cycle(agent, tmp_path, cg, ls_cpu_file(cg, 1))
    (cg / folders[-1] / "cpuset.cpus").write_text("0-7\n")           # koordlet beside the agent, say
    out = busy_cycle(agent, tmp_path, cg, ls_cpu_file(cg, 1), second=2)
    assert cpuset_writes(out) == []
    assert out["capabilitiesOff"]["cpu-suppress"].startswith(f"another writer: {folders[-1]}/cpuset.cpus no longer")


def test_the_folders_are_read_again_after_a_write_and_every_ten_seconds(tmp_path: Path) -> None:
    cg, folders = v1_cpuset_tree(tmp_path)
    agent = agent_on(tmp_path, state_for(tmp_path, "cpuset"), cg)
    agent.cycle(now=10.0)
    ls = ls_cpu_file(cg, 1)
    assert cpuset_writes(busy_cycle(agent, tmp_path, cg, ls, second=1))       # written at 11 s
    assert cpuset_writes(busy_cycle(agent, tmp_path, cg, ls, second=2)) == []  # read again at 12 s: as written
    (cg / folders[-1] / "cpuset.cpus").write_text("0-7\n")
    out = busy_cycle(agent, tmp_path, cg, ls, second=3)
    assert cpuset_writes(out) == [] and out["capabilitiesOff"] == {}          # not read again yet
    out = busy_cycle(agent, tmp_path, cg, ls, second=12)                       # 10 s after the last read
    assert out["capabilitiesOff"]["cpu-suppress"].startswith("another writer")


# -- the cfsQuota policy through the cycle ----------------------------------------------------------------------
def test_sampling_noise_rewrites_neither_the_tier_nor_the_be_folders_under_it(tmp_path: Path) -> None:
    """cgroup v1, where the BE pods' quotas (2 cores asked) are clamped to the tier's: a tier write skipped for
    noise leaves them alone too."""
    cg = tree(tmp_path, 1, "cgroupfs")
    agent = agent_on(tmp_path, state_for(tmp_path, "cfsQuota", percent=30), cg)
    agent.cycle(now=10.0)                            # no CPU rate yet: the BE pods' own limits only
    ls, busy, idle, later = ls_cpu_file(cg, 1), 1000, 9000, []
    for second in range(1, 31):
        # ls-web-0 steady at 500 m, the node at 1244 m and 1156 m in turn: the budget 8 cores × 30 % − 500 −
        # (node − 500) moves between 1156 m and 1244 m, by more than 1 % of the node's cores (koordlet's band).
        step = 622 if second % 2 else 578
        busy, idle = busy + step, idle + 1000 - step
        write_proc(tmp_path / "proc", 32 * GI, 24 * GI, busy=busy, idle=idle, cpus=2)
        ls.write_text(f"{500000000 * second}\n")
        writes = agent.cycle(now=10.0 + second).as_dict()["cgroupWrites"]
        if second == 1:
            first = writes
        else:
            later += writes
    tier = {"path": "cpu/kubepods/besteffort", "file": "cpu.cfs_quota_us", "value": "115600"}
    assert tier in first and len(first) > 1          # the tier, and the BE folders clamped under it
    assert later == []
    assert (cg / tier["path"] / tier["file"]).read_text() == "115600"
