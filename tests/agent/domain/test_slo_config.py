"""slo-controller-config: Koordinator's field names, the defaults of docs/agent.md, node overrides, validation, last good config."""

from __future__ import annotations

import json

import pytest

from harness.apiserver import load_exchange
from webhook.agent.domain.slo_config import Colocation, ConfigTracker, MemoryEvict, SloConfigError, parse_slo_config


def cm(colocation: object = None, threshold: object = None) -> dict[str, str]:
    data = {}
    if colocation is not None:
        data["colocation-config"] = colocation if isinstance(colocation, str) else json.dumps(colocation)
    if threshold is not None:
        data["resource-threshold-config"] = threshold if isinstance(threshold, str) else json.dumps(threshold)
    return data


def test_defaults_are_off() -> None:
    colo, mem = parse_slo_config(None).for_node({})
    assert colo == Colocation(enable=False, metricAggregateDurationSeconds=60, cpuReclaimThresholdPercent=65,
                              memoryReclaimThresholdPercent=65, memoryCalculatePolicy="usage",
                              degradeTimeMinutes=15, updateTimeThresholdSeconds=300, resourceDiffThreshold=0.1)
    assert mem == MemoryEvict(enable=False, memoryEvictThresholdPercent=70, memoryEvictLowerPercent=68)


def test_recorded_configmap() -> None:
    data = load_exchange("configmaps-get-slo-controller-config")["response"]["body"]["data"]
    colo, mem = parse_slo_config(data).for_node({"kubernetes.io/hostname": "colo-node-1"})
    assert (colo.enable, colo.cpuReclaimThresholdPercent, colo.memoryReclaimThresholdPercent) == (True, 60, 70)
    assert mem == MemoryEvict(True, 70, 68)


@pytest.mark.parametrize("name,data,labels,colo_fields,mem", [
    ("first matching nodeConfig wins",
     cm({"enable": True, "nodeConfigs": [
         {"name": "a", "nodeSelector": {"matchLabels": {"pool": "x"}}, "cpuReclaimThresholdPercent": 50},
         {"name": "b", "nodeSelector": {"matchLabels": {"pool": "x"}}, "cpuReclaimThresholdPercent": 40}]}),
     {"pool": "x"}, {"enable": True, "cpuReclaimThresholdPercent": 50}, MemoryEvict()),
    ("no match: cluster strategy", cm({"enable": True, "nodeConfigs": [
        {"name": "a", "nodeSelector": {"matchLabels": {"pool": "x"}}, "cpuReclaimThresholdPercent": 50}]}),
     {"pool": "y"}, {"enable": True, "cpuReclaimThresholdPercent": 65}, MemoryEvict()),
    ("cluster enable:false wins over a node's enable:true", cm({"enable": False, "nodeConfigs": [
        {"name": "a", "nodeSelector": {"matchLabels": {"pool": "x"}}, "enable": True}]}),
     {"pool": "x"}, {"enable": False}, MemoryEvict()),
    ("node may disable", cm({"enable": True, "nodeConfigs": [
        {"name": "a", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}, "enable": False}]}),
     {"pool": "x"}, {"enable": False}, MemoryEvict()),
    ("nodeStrategies over clusterStrategy", cm(threshold={
        "clusterStrategy": {"enable": True, "memoryEvictThresholdPercent": 80},
        "nodeStrategies": [{"name": "s", "nodeSelector": {"matchLabels": {"pool": "x"}}, "memoryEvictLowerPercent": 60}]}),
     {"pool": "x"}, {"enable": False}, MemoryEvict(True, 80, 60)),
    ("lower defaults to threshold - 2", cm(threshold={"clusterStrategy": {"enable": True, "memoryEvictThresholdPercent": 90}}),
     {}, {}, MemoryEvict(True, 90, 88)),
    ("unknown fields are ignored", cm({"enable": True, "metricReportIntervalSeconds": 60, "cpuCalculatePolicy": "usage"}),
     {}, {"enable": True}, MemoryEvict()),
    ("empty values mean defaults", {"colocation-config": "", "resource-threshold-config": "  "}, {}, {"enable": False},
     MemoryEvict()),
])
def test_for_node(name: str, data: dict, labels: dict, colo_fields: dict, mem: MemoryEvict) -> None:
    colo, got_mem = parse_slo_config(data).for_node(labels)
    for k, v in colo_fields.items():
        assert getattr(colo, k) == v, k
    assert got_mem == mem


@pytest.mark.parametrize("name,data,error", [
    ("invalid JSON", cm("{bad"), "colocation-config: invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("not an object", cm("[1]"), "colocation-config: must be a JSON object, got list"),
    ("negative reclaim", cm({"cpuReclaimThresholdPercent": -1}), "colocation-config: cpuReclaimThresholdPercent: Input should be greater than or equal to 0 (got -1)"),
    ("wrong type", cm({"enable": "true"}), 'colocation-config: enable: Input should be a valid boolean (got "true")'),
    ("fractional int", cm({"metricAggregateDurationSeconds": 1.5}), "colocation-config: metricAggregateDurationSeconds: Input should be a valid integer (got 1.5)"),
    ("diff threshold > 1", cm({"resourceDiffThreshold": 2}), "colocation-config: resourceDiffThreshold: Input should be less than or equal to 1 (got 2)"),
    ("unknown policy", cm({"memoryCalculatePolicy": "max"}), "colocation-config: memoryCalculatePolicy: Input should be 'usage', 'request' or 'maxUsageRequest' (got \"max\")"),
    ("nodeConfig without selector", cm({"nodeConfigs": [{"name": "a"}]}), "nodeConfigs NodeSelector must not empty error! configType: colocation-config,nodeConfig name:a"),
    ("bad selector", cm({"nodeConfigs": [{"name": "a", "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Is"}]}}]}),
     "colocation-config: nodeConfigs[0].nodeSelector.matchExpressions[0].operator: Unsupported value: 'Is': supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""),
    ("selector a string", cm({"nodeConfigs": [{"name": "a", "nodeSelector": "foo"}]}),
     "colocation-config: nodeConfigs[0].nodeSelector: must be an object, got str"),
    ("selector a list", cm(threshold={"nodeStrategies": [{"name": "a", "nodeSelector": ["x"]}]}),
     "resource-threshold-config: nodeStrategies[0].nodeSelector: must be an object, got list"),
    ("value not a string", {"colocation-config": 5}, "colocation-config: must be a string holding JSON, got int"),
    ("threshold over 100", cm(threshold={"clusterStrategy": {"memoryEvictThresholdPercent": 101}}),
     "resource-threshold-config: clusterStrategy.memoryEvictThresholdPercent: Input should be less than or equal to 100 (got 101)"),
    ("lower not below threshold", cm(threshold={"clusterStrategy": {"memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 70}}),
     "resource-threshold-config: clusterStrategy.memoryEvictLowerPercent (70) must be less than memoryEvictThresholdPercent (70)"),
    ("lower without threshold above default", cm(threshold={"clusterStrategy": {"memoryEvictLowerPercent": 75}}),
     "resource-threshold-config: clusterStrategy.memoryEvictLowerPercent (75) must be less than memoryEvictThresholdPercent (70)"),
])
def test_invalid(name: str, data: dict, error: str) -> None:
    with pytest.raises(SloConfigError) as exc:
        parse_slo_config(data)
    assert str(exc.value) == error


def test_tracker_keeps_last_good_and_reports_once() -> None:
    t = ConfigTracker()
    good = cm({"enable": True})
    assert t.update(good) is None and t.config.for_node({})[0].enable
    bad = cm("{bad")
    first = t.update(bad)
    assert first is not None and first.endswith("keeping the last good configuration")
    assert t.update(bad) is None and t.update(dict(bad)) is None        # reported once
    assert t.config.for_node({})[0].enable                               # still the good one
    assert t.update(cm({"enable": False})) is None and not t.config.for_node({})[0].enable
    assert t.update(bad) is not None                                     # a new occurrence is reported again
    assert t.update(None) is None and not t.config.for_node({})[0].enable  # deleted ConfigMap: defaults


def test_tracker_reports_a_config_refused_for_its_type_every_time_it_changes() -> None:
    t = ConfigTracker()
    bad = {"colocation-config": 5}
    message = t.update(bad)
    assert message is not None and "must be a string holding JSON" in message and t.error == message
    assert t.update(bad) is None and t.error == message                 # reported once, still in error
