"""BE CPU suppression (cfsQuota policy): the koordlet formula, floor, quota steps, reserved CPU, config."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from webhook.agent.domain.cgroup_limits import UNLIMITED
from webhook.agent.domain.cpu_suppress import (
    BE_MIN_QUOTA,
    be_quota,
    capacity_cores,
    next_be_quota,
    node_reserved_milli,
    suppress_milli,
)
from webhook.agent.domain.slo_config import CPUSuppress, SloConfigError, parse_slo_config


def test_formula_counts_non_be_and_system_usage() -> None:
    # 16 cores × 70% = 11200; non-BE pods use 3000; node uses 8000 of which pods 5000: system 3000.
    s = suppress_milli(16000, 70, None, 8000.0, [(False, 3000.0), (True, 2000.0)], 0)
    assert (s.milli, s.non_be_milli, s.system_milli) == (11200 - 3000 - 3000, 3000, 3000)
    assert "capacity:16000 × 70%" in s.explain


def test_reserved_cpu_is_the_least_system_usage() -> None:
    s = suppress_milli(16000, 70, None, 1000.0, [], 2000)
    assert s.system_milli == 2000 and s.milli == 11200 - 2000


def test_floor_and_minimum_quota() -> None:
    s = suppress_milli(4000, 50, None, 4000.0, [(False, 3900.0)], 0)
    assert s.milli == 2000 - 3900 - 100                        # negative: LS already uses more
    assert be_quota(s.milli, 100000) == BE_MIN_QUOTA            # koordlet's 2000 µs floor
    assert suppress_milli(4000, 50, 10, 4000.0, [(False, 3900.0)], 0).milli == 400   # cpuSuppressMinPercent
    assert be_quota(1500, 100000) == 150000


def test_quota_steps() -> None:
    cores, period = 16, 100000
    assert next_be_quota(800000, UNLIMITED, cores, period) == 800000          # first time: straight there
    assert next_be_quota(800000 + 15000, 800000, cores, period) is None       # < 1 % of 16 cores: left alone
    assert next_be_quota(BE_MIN_QUOTA, BE_MIN_QUOTA + 1000, cores, period) == BE_MIN_QUOTA   # the floor always
    assert next_be_quota(1600000, 200000, cores, period) == 200000 + 160000   # up by at most 10 % per cycle
    assert next_be_quota(200000, 1600000, cores, period) == 200000            # down at once
    assert next_be_quota(500000, 500000, cores, period) is None
    assert capacity_cores(15500) == 16


def _writes(targets: list[int], cores: int, period: int = 100000) -> list[int]:
    """The quotas written, cycle after cycle, for ``targets``, from an unlimited besteffort folder."""
    current, written = UNLIMITED, []
    for target in targets:
        quota = next_be_quota(target, current, cores, period)
        if quota is not None:
            current = quota
            written.append(quota)
    return written


@pytest.mark.parametrize("cores,steady", [(2, 100000), (16, 800000), (64, 4000000)],
                         ids=["2 CPUs, 1 core", "16 CPUs, 8 cores", "64 CPUs, 40 cores"])
def test_sampling_noise_is_not_written(cores: int, steady: int) -> None:
    # ±3 % around a steady budget for 100 cycles: koordlet's 1 % of the node's cores rewrote it 36 to 55 times.
    rng = random.Random(cores)
    written = _writes([round(steady * (1 + rng.uniform(-0.03, 0.03))) for _ in range(100)], cores)
    assert 1 <= len(written) <= 2, written
    assert abs(written[-1] - steady) <= steady * 0.03


def test_a_drop_that_matters_is_written_at_once_and_a_rise_waits() -> None:
    cores, period = 16, 100000
    assert next_be_quota(200000, 800000, cores, period) == 200000             # LS took 6 cores: at once, whole
    # A fall of 5 % of the quota is written (here more than 1 % of the node's cores and 0.1 core) ...
    assert next_be_quota(800000 - 40000, 800000, cores, period) == 800000 - 40000
    assert next_be_quota(800000 - 39000, 800000, cores, period) is None
    # ... the same move up is not: a rise waits for 10 %.
    assert next_be_quota(800000 + 40000, 800000, cores, period) is None
    assert next_be_quota(800000 + 80000, 800000, cores, period) == 880000
    # On 2 CPUs 0.1 core is the band both ways (1 % would be 0.02 core, below the noise of 1 s samples).
    assert next_be_quota(30000 - 9000, 30000, 2, period) is None
    assert next_be_quota(30000 - 10000, 30000, 2, period) == 20000
    assert next_be_quota(30000 + 9000, 30000, 2, period) is None
    assert next_be_quota(30000 + 10000, 30000, 2, period) == 40000
    assert next_be_quota(BE_MIN_QUOTA, 5000, 2, period) == BE_MIN_QUOTA       # the floor, whatever the band


def node(capacity: str, allocatable: str, annotation: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n"}
    if annotation is not None:
        meta["annotations"] = {"node.koordinator.sh/reservation": json.dumps(annotation)}
    return {"metadata": meta, "status": {"capacity": {"cpu": capacity}, "allocatable": {"cpu": allocatable}}}


def test_node_reserved() -> None:
    assert node_reserved_milli(node("8", "7500m")) == 500
    assert node_reserved_milli(node("8", "8", {"resources": {"cpu": "2"}})) == 2000
    assert node_reserved_milli(node("8", "7", {"reservedCPUs": "0-2"})) == 3000
    assert node_reserved_milli(node("8", "7", {"resources": {"cpu": "500m"}})) == 1000
    assert node_reserved_milli(None) == 0


def _threshold(doc: dict[str, Any]) -> dict[str, str]:
    return {"resource-threshold-config": json.dumps(doc)}


def test_config_fields_and_node_overrides() -> None:
    cfg = parse_slo_config(_threshold({
        "clusterStrategy": {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 60},
        "nodeStrategies": [{"name": "db", "nodeSelector": {"matchLabels": {"pool": "db"}},
                            "cpuSuppressThresholdPercent": 40, "cpuSuppressMinPercent": 5}]}))
    assert cfg.cpu_suppress_for_node({}) == CPUSuppress(True, 60, None, "cfsQuota")
    assert cfg.cpu_suppress_for_node({"pool": "db"}) == CPUSuppress(True, 40, 5, "cfsQuota")
    assert parse_slo_config(None).cpu_suppress_for_node({}) == CPUSuppress(False, 65, None, "cpuset")


@pytest.mark.parametrize("field,value,error", [
    ("cpuSuppressPolicy", "cfsquota", "clusterStrategy.cpuSuppressPolicy: Input should be 'cpuset' or 'cfsQuota'"),
    ("cpuSuppressThresholdPercent", 101, "clusterStrategy.cpuSuppressThresholdPercent: Input should be less than"),
    ("cpuSuppressMinPercent", "5", "clusterStrategy.cpuSuppressMinPercent: Input should be a valid integer"),
])
def test_bad_config_is_an_error_naming_the_field(field: str, value: Any, error: str) -> None:
    with pytest.raises(SloConfigError, match=error.replace("(", r"\(")):
        parse_slo_config(_threshold({"clusterStrategy": {"enable": True, field: value}}))
