"""The cycle report: typed fields in, the document ``colocation-agent once`` prints out."""

from __future__ import annotations

from webhook.agent.domain.cgroup_limits import CgroupWrite
from webhook.agent.report import Condition, CycleReport, EvictionReport, MemoryReport, SuppressReport
from webhook.core.resources import BATCH_RESOURCES, MID_RESOURCES


def test_a_report_of_nothing_measured_names_every_field_with_its_empty_value() -> None:
    assert CycleReport("n1").as_dict() == {
        "node": "n1", "memory": None, "releaseTargetBytes": 0, "evictions": [],
        "batch": {name: 0 for name in BATCH_RESOURCES}, "batchReason": None, "conditions": [],
        "cgroupWrites": [], "cpuSuppress": None, "cpuEviction": [], "memoryEviction": [], "capabilitiesOff": {},
        "configError": None,
        "configWarnings": [], "configNotices": [], "mid": {name: 0 for name in MID_RESOURCES}, "midReason": None}


def test_every_part_becomes_its_json_names_in_order() -> None:
    report = CycleReport("n1", MemoryReport(3 * 1024, 1024), 512,
                         [EvictionReport("ns", "be-0", "uid-0", None, 2048, "EvictPodByNodeMemoryUsage")],
                         {"kubernetes.io/batch-cpu": 1500}, "why", [Condition("C", "True", "R", "m")],
                         [CgroupWrite("kubepods/besteffort", "cpu.cfs_quota_us", "-1")], {"cpu-suppress": "disabled"},
                         SuppressReport("cpuset", "0-3", 4.0, None), "bad", ["typo"], ["ignored"],
                         {"kubernetes.io/mid-cpu": 700}, "mid why")
    out = report.as_dict()
    assert list(out) == ["node", "memory", "releaseTargetBytes", "evictions", "batch", "batchReason", "mid",
                         "midReason", "conditions", "cgroupWrites", "cpuSuppress", "cpuEviction", "memoryEviction",
                         "capabilitiesOff", "configError", "configWarnings", "configNotices"]
    assert (out["mid"], out["midReason"]) == ({"kubernetes.io/mid-cpu": 700}, "mid why")
    assert (out["configError"], out["configWarnings"], out["configNotices"]) == ("bad", ["typo"], ["ignored"])
    assert out["cpuSuppress"] == {"policy": "cpuset", "beCPUs": "0-3", "cores": 4.0, "fallback": None,
                                  "reason": None}
    assert out["memory"] == {"capacityBytes": 3072, "usedBytes": 1024, "usagePercent": 33.33}
    assert out["evictions"] == [{"namespace": "ns", "name": "be-0", "uid": "uid-0", "priority": None,
                                 "usageBytes": 2048, "reason": "EvictPodByNodeMemoryUsage"}]
    assert out["conditions"] == [{"type": "C", "status": "True", "reason": "R", "message": "m"}]
    assert out["cgroupWrites"] == [{"path": "kubepods/besteffort", "file": "cpu.cfs_quota_us", "value": "-1"}]
    assert (out["batch"], out["batchReason"], out["capabilitiesOff"]) == (
        {"kubernetes.io/batch-cpu": 1500}, "why", {"cpu-suppress": "disabled"})


def test_the_document_is_a_copy_the_report_does_not_share() -> None:
    report = CycleReport("n1")
    report.as_dict()["batch"]["kubernetes.io/batch-cpu"] = 7
    assert report.batch["kubernetes.io/batch-cpu"] == 0


def test_no_capacity_is_no_usage_percent() -> None:
    assert MemoryReport(0, 0).as_dict()["usagePercent"] == 0.0
