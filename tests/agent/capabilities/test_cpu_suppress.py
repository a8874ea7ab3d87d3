"""CPU suppression's policies: the one in force suppresses, the others recover once; cpuset is not implemented
yet (it says so once and the quota is recovered)."""

from __future__ import annotations

import logging

import pytest

from webhook.agent.capabilities.cpu_suppress import CPUSET_POLICY, CpuSuppress, SuppressTarget
from webhook.agent.collectors import PodUsage, Sample
from webhook.agent.domain.cgroup_limits import UNLIMITED, CgroupWrite, Current
from webhook.agent.domain.cpu_suppress import BE_MIN_QUOTA, CFS_QUOTA_POLICY
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.inputs import Inputs, pod_view
from webhook.agent.metrics import AgentMetrics

NODE = "n1"
TIER = "kubepods/besteffort"
PERIOD = 100000
LS = {"metadata": {"uid": "ls-0"},
      "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


def _inputs(cfg: CPUSuppress) -> Inputs:
    return Inputs(None, [pod_view(LS)], False, Colocation(), MemoryEvict(), cfg)


def _sample(node_cpu_milli: float | None, ls_milli: float) -> Sample:
    return Sample(0.0, 8 << 30, 4 << 30, 4, node_cpu_milli, {"ls-0": PodUsage(ls_milli, None)})


def _recorded(suppress: CpuSuppress, target: SuppressTarget, tier: Current, cfg: CPUSuppress) -> None:
    writes = [CgroupWrite(TIER, "cpu.cfs_quota_us", str(target.quota))] if target.quota is not None else []
    suppress.record(TIER, tier, target, writes, {(TIER, "cpu.cfs_quota_us")}, False, cfg)


def test_cfs_quota_in_force_gives_the_tier_what_ls_leaves() -> None:
    metrics = AgentMetrics()
    suppress = CpuSuppress(NODE, metrics)
    cfg = CPUSuppress(enable=True, cpuSuppressThresholdPercent=65, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    tier = Current(quota=UNLIMITED, period=PERIOD)
    assert suppress.in_force(cfg) is suppress.policies[CFS_QUOTA_POLICY]
    # 4 cores × 65 % = 2600 − ls-0 1000 − system (1500 − 1000) = 1100 m -> 110000 µs per 100000.
    target = suppress.decide(_sample(1500.0, 1000.0), _inputs(cfg), tier)
    assert target == SuppressTarget(quota=110000)
    _recorded(suppress, target, tier, cfg)
    assert metrics.registry.get_sample_value("koordlet_be_suppress_cpu_cores",
                                             {"node": NODE, "type": CFS_QUOTA_POLICY}) == 1.1
    assert metrics.registry.get_sample_value("koordlet_be_suppress_ls_used_cpu_cores", {"node": NODE}) == 1.0


def test_without_a_cpu_rate_nothing_is_written() -> None:
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    target = CpuSuppress(NODE, AgentMetrics()).decide(_sample(None, 0.0), _inputs(cfg),
                                                      Current(quota=UNLIMITED, period=PERIOD))
    assert not target.writes


def test_the_floor_holds_when_ls_takes_everything() -> None:
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    target = CpuSuppress(NODE, AgentMetrics()).decide(_sample(4000.0, 4000.0), _inputs(cfg),
                                                      Current(quota=UNLIMITED, period=PERIOD))
    assert target.quota == BE_MIN_QUOTA


@pytest.mark.parametrize("cfg", [CPUSuppress(enable=False, cpuSuppressPolicy=CFS_QUOTA_POLICY),
                                 CPUSuppress(enable=True, cpuSuppressPolicy=CPUSET_POLICY)],
                         ids=["suppression off", "cpuset in force"])
def test_a_quota_left_on_the_tier_is_recovered_once(cfg: CPUSuppress) -> None:
    suppress = CpuSuppress(NODE, AgentMetrics())
    tier = Current(quota=300000, period=PERIOD)
    first = suppress.decide(_sample(1500.0, 1000.0), _inputs(cfg), tier)
    assert first == SuppressTarget(quota=UNLIMITED)
    _recorded(suppress, first, tier, cfg)
    # Recovered: someone setting a quota again is not undone (koordlet recovers once, too).
    assert not suppress.decide(_sample(1500.0, 1000.0), _inputs(cfg), tier).writes


def test_an_unlimited_tier_needs_no_recovery() -> None:
    cfg = CPUSuppress(enable=False)
    assert not CpuSuppress(NODE, AgentMetrics()).decide(_sample(1500.0, 1000.0), _inputs(cfg),
                                                        Current(quota=UNLIMITED, period=PERIOD)).writes


def test_cpuset_says_once_that_it_is_not_implemented(caplog: pytest.LogCaptureFixture) -> None:
    suppress = CpuSuppress(NODE, AgentMetrics())
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CPUSET_POLICY)
    with caplog.at_level(logging.INFO, "colocation-agent"):
        for _ in range(3):
            suppress.decide(_sample(1500.0, 1000.0), _inputs(cfg), Current(quota=UNLIMITED, period=PERIOD))
    said = [r.getMessage() for r in caplog.records if "not implemented" in r.getMessage()]
    assert said == ["cpuSuppressPolicy cpuset is not implemented: BE CPU is not suppressed (cfsQuota is)"]


def test_an_unreadable_quota_is_left_alone() -> None:
    cfg = CPUSuppress(enable=True, cpuSuppressPolicy=CFS_QUOTA_POLICY)
    assert not CpuSuppress(NODE, AgentMetrics()).decide(_sample(1500.0, 1000.0), _inputs(cfg),
                                                        Current(quota=None, period=PERIOD)).writes
