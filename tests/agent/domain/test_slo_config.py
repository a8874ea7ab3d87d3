"""slo-controller-config: Koordinator's field names, the defaults of docs/agent.md, node overrides, validation, last good config."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.apiserver import load_exchange
from webhook.agent.domain.slo_config import (
    Colocation,
    ConfigTracker,
    KeyNotice,
    MemoryEvict,
    SloConfigError,
    key_notices,
    label_overrides,
    label_percent,
    parse_slo_config,
)


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
    ("Koordinator's fields not acted on are accepted", cm({"enable": True, "cpuCalculatePolicy": "usage",
                                                             "batchCPUThresholdPercent": 50, "extensions": {}}),
     {}, {"enable": True}, MemoryEvict()),
    ("a misspelt field is ignored", cm(threshold={"clusterStrategy": {"enable": True, "memoryEvictThresholdPrecent": 40}}),
     {}, {}, MemoryEvict(True, 70, 68)),
    # Go's encoding/json matches a key to a field case-insensitively: koord-manager reads "Enable" as enable.
    ("keys match case-insensitively, as in Go", cm({"Enable": True}, {"ClusterStrategy": {"ENABLE": True}}),
     {}, {"enable": True}, MemoryEvict(True, 70, 68)),
    ("null is unset", cm({"enable": True, "cpuReclaimThresholdPercent": None, "nodeConfigs": None},
                         {"clusterStrategy": None}), {}, {"enable": True, "cpuReclaimThresholdPercent": 65},
     MemoryEvict()),
    ("empty values mean defaults", {"colocation-config": "", "resource-threshold-config": "  "}, {}, {"enable": False},
     MemoryEvict()),
])
def test_for_node(name: str, data: dict[str, Any], labels: dict[str, Any], colo_fields: dict[str, Any], mem: MemoryEvict) -> None:
    colo, got_mem = parse_slo_config(data).for_node(labels)
    for k, v in colo_fields.items():
        assert getattr(colo, k) == v, k
    assert got_mem == mem


@pytest.mark.parametrize("name,data,error", [
    ("invalid JSON", cm("{bad"), "colocation-config: invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("not an object", cm("[1]"), "colocation-config: must be a JSON object, got list"),
    ("negative reclaim", cm({"cpuReclaimThresholdPercent": -1}), "colocation-config: cpuReclaimThresholdPercent: Input should be greater than or equal to 0 (got -1)"),
    ("wrong type", cm({"enable": "true"}), 'colocation-config: enable: Input should be a valid boolean (got "true")'),
    ("yes is no boolean", cm({"enable": "yes"}), 'colocation-config: enable: Input should be a valid boolean (got "yes")'),
    ("wrong type in a node entry", cm(threshold={"nodeStrategies": [
        {"name": "s", "nodeSelector": {"matchLabels": {"pool": "x"}}, "memoryEvictThresholdPercent": "60"}]}),
     'resource-threshold-config: nodeStrategies[0].memoryEvictThresholdPercent: Input should be a valid integer (got "60")'),
    # koord-manager's json.Unmarshal refuses these as well, though this agent does not act on them.
    ("wrong type of a field not acted on", cm({"batchCPUThresholdPercent": "50"}),
     'colocation-config: batchCPUThresholdPercent: Input should be a valid integer (got "50")'),
    ("wrong type, key in another case", cm({"ENABLE": "yes"}), 'colocation-config: enable: Input should be a valid boolean (got "yes")'),
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
def test_invalid(name: str, data: dict[str, Any], error: str) -> None:
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


NODE_SELECTOR = {"matchLabels": {"pool": "x"}}


@pytest.mark.parametrize("name,data,warnings", [
    ("misspelt in clusterStrategy", cm(threshold={"clusterStrategy": {"memoryEvictThresholdPrecent": 40}}),
     ['resource-threshold-config: clusterStrategy: unknown key "memoryEvictThresholdPrecent" is ignored, '
      'did you mean "memoryEvictThresholdPercent"?']),
    ("misspelt in a node entry", cm(threshold={"nodeStrategies": [
        {"name": "strict", "nodeSelector": NODE_SELECTOR, "memoryEvictLowerPrecent": 50}]}),
     ['resource-threshold-config: nodeStrategies[0] (name "strict"): unknown key "memoryEvictLowerPrecent" is '
      'ignored, did you mean "memoryEvictLowerPercent"?']),
    ("misspelt at the top of colocation-config", cm({"enabel": True}),
     ['colocation-config: unknown key "enabel" is ignored, did you mean "enable"?']),
    ("misspelt in a nodeConfigs entry without a name", cm({"nodeConfigs": [
        {"nodeSelector": NODE_SELECTOR, "cpuReclaimThresholdPrecent": 50}]}),
     ['colocation-config: nodeConfigs[0]: unknown key "cpuReclaimThresholdPrecent" is ignored, '
      'did you mean "cpuReclaimThresholdPercent"?']),
    ("nothing close", cm({"colour": "blue"}), ['colocation-config: unknown key "colour" is ignored (no known key is close)']),
    ("a strategy field outside clusterStrategy", cm(threshold={"memoryEvictThresholdPercent": 60}),
     ['resource-threshold-config: unknown key "memoryEvictThresholdPercent" is ignored, '
      'did you mean "clusterStrategy.memoryEvictThresholdPercent"?']),
    ("a node entry's own keys are known", cm({"nodeConfigs": [{"name": "a", "nodeSelector": NODE_SELECTOR}]}), []),
    ("a node entry holds no nodeConfigs", cm({"nodeConfigs": [{"name": "a", "nodeSelector": NODE_SELECTOR,
                                                               "nodeConfigs": []}]}),
     ['colocation-config: nodeConfigs[0] (name "a"): unknown key "nodeConfigs" is ignored (no known key is close)']),
    ("a misspelt section", {"colocation-confg": "{}"},
     ['data: unknown key "colocation-confg" is ignored, did you mean "colocation-config"?']),
    # Koordinator's extensions register data keys of their own: only one close to a known key is likely a typo.
    ("another data key", {"my-extension-config": "{}"}, []),
    ("in an invalid config too", cm({"enable": "yes", "enabel": True}),
     ['colocation-config: unknown key "enabel" is ignored, did you mean "enable"?']),
])
def test_unknown_keys_are_warned_with_the_nearest_known_key(name: str, data: dict[str, Any], warnings: list[str]) -> None:
    notices = key_notices(data)
    assert [str(n) for n in notices if not n.koordinator] == warnings


def test_koordinator_keys_not_acted_on_are_told_apart() -> None:
    data = {**cm({"enable": True, "batchCPUThresholdPercent": 50, "nodeConfigs": [
        {"name": "a", "nodeSelector": NODE_SELECTOR, "cpuCalculatePolicy": "usage"}]},
        {"clusterStrategy": {"memoryAllocatableEvictLowerPercent": 100}}), "resource-qos-config": "{}"}
    # memoryAllocatableEvict*Percent are acted on (MemoryAllocatableEvict): no notice for them.
    notices = key_notices(data)
    assert all(n.koordinator for n in notices)
    assert [str(n) for n in notices] == [
        'data: key "resource-qos-config" is Koordinator\'s but this agent does not act on it',
        'colocation-config: key "batchCPUThresholdPercent" is Koordinator\'s but this agent does not act on it',
        'colocation-config: nodeConfigs[0] (name "a"): key "cpuCalculatePolicy" is Koordinator\'s but this agent '
        'does not act on it']
    assert [(n.section, n.key) for n in notices] == [("data", "resource-qos-config"),
                                                     ("colocation-config", "batchCPUThresholdPercent"),
                                                     ("colocation-config", "cpuCalculatePolicy")]


def test_tracker_tells_each_key_notice_once() -> None:
    t = ConfigTracker()
    typo = {"clusterStrategy": {"enable": True, "memoryEvictThresholdPrecent": 40}}
    assert t.update(cm(threshold=typo)) is None
    (first,) = t.fresh
    assert first.key == "memoryEvictThresholdPrecent" and t.notices == (first,)
    assert t.update(cm(threshold=typo)) is None and t.fresh == ()               # the same data: nothing new
    assert t.update(cm({"enable": True}, typo)) is None and t.fresh == ()      # the same typo: told once
    assert t.notices == (first,)
    assert t.update(cm({"enabel": True}, typo)) is None
    fresh: tuple[KeyNotice, ...] = t.fresh   # (not the empty tuple the asserts above narrowed it to)
    assert [n.key for n in fresh] == ["enabel"] and len(t.notices) == 2
    assert t.update(cm({"enable": True})) is None and t.notices == () and t.fresh == ()
    assert t.update(cm(threshold=typo)) is None and t.fresh == (first,)        # back again: told again


def test_tracker_keeps_the_last_good_config_on_a_wrong_type() -> None:
    t = ConfigTracker()
    assert t.update(cm({"enable": True})) is None
    message = t.update(cm({"enable": "yes"}))
    assert message == ('colocation-config: enable: Input should be a valid boolean (got "yes"); keeping the last '
                       'good configuration')
    assert t.invalid == 'colocation-config: enable: Input should be a valid boolean (got "yes")'
    assert t.config.for_node({})[0].enable


# -- the mid keys (pkg/slo-controller/noderesource/plugins/midresource/plugin.go) ----------------------------------
def test_the_mid_keys_default_as_koordinators() -> None:
    colo, _ = parse_slo_config(cm({"enable": True})).for_node({})
    assert (colo.midReclaimMode, colo.midCPUThresholdPercent, colo.midMemoryThresholdPercent,
            colo.midUnallocatedPercent, colo.midStaticCPUReservedPercent,
            colo.midStaticMemoryReservedPercent) == ("", 100, 100, 0, 0, 0)


def test_the_mid_keys_are_read_per_node_and_the_ratio_labels_win() -> None:
    config = parse_slo_config(cm({
        "enable": True, "midCPUThresholdPercent": 60, "midUnallocatedPercent": 20, "midReclaimMode": "static",
        "midStaticCPUReservedPercent": 10, "midStaticMemoryReservedPercent": 15,
        "nodeConfigs": [{"name": "x", "nodeSelector": NODE_SELECTOR, "midMemoryThresholdPercent": 70,
                         "midStaticCPUReservedPercent": 30}]}))
    colo, _ = config.for_node({})
    assert (colo.midCPUThresholdPercent, colo.midMemoryThresholdPercent, colo.midUnallocatedPercent,
            colo.midReclaimMode, colo.midStaticCPUReservedPercent) == (60, 100, 20, "static", 10)
    on_x, _ = config.for_node({"pool": "x"})
    assert (on_x.midMemoryThresholdPercent, on_x.midStaticCPUReservedPercent,
            on_x.midStaticMemoryReservedPercent) == (70, 30, 15)
    labelled, _ = config.for_node({"pool": "x", "node.koordinator.sh/mid-static-cpu-reserved-ratio": "0.29",
                                   "node.koordinator.sh/mid-static-memory-reserved-ratio": "0.5"})
    # int64(0.29 * 100) in float64 is 28, as koord-manager truncates it.
    assert (labelled.midStaticCPUReservedPercent, labelled.midStaticMemoryReservedPercent) == (28, 50)


@pytest.mark.parametrize(("raw", "percent"), [("0.1", 10), ("0.12", 12), ("1.5", 150), ("0", 0), ("1e-1", 10),
                                              ("-0.1", None), ("x", None), ("nan", None), ("inf", None),
                                              (" 0.1", None), ("0_1", None), ("", None)])
def test_a_ratio_label_is_read_as_koord_manager_reads_it(raw: str, percent: int | None) -> None:
    assert label_percent(raw) == percent
    fields, ignored = label_overrides({"node.koordinator.sh/mid-static-memory-reserved-ratio": raw})
    assert fields == ({} if percent is None else {"midStaticMemoryReservedPercent": percent})
    assert ignored == (() if percent is not None else (
        f"node label node.koordinator.sh/mid-static-memory-reserved-ratio={raw!r} is ignored: not a ratio >= 0 "
        "(as koord-manager ignores it)",))


@pytest.mark.parametrize(("data", "error"), [
    (cm({"midCPUThresholdPercent": 101}),
     "colocation-config: midCPUThresholdPercent: Input should be less than or equal to 100 (got 101)"),
    (cm({"midMemoryThresholdPercent": -1}),
     "colocation-config: midMemoryThresholdPercent: Input should be greater than or equal to 0 (got -1)"),
    (cm({"midUnallocatedPercent": "10"}),
     'colocation-config: midUnallocatedPercent: Input should be a valid integer (got "10")'),
    (cm({"midStaticCPUReservedPercent": 10.5}),
     "colocation-config: midStaticCPUReservedPercent: Input should be a valid integer (got 10.5)"),
    (cm({"nodeConfigs": [{"name": "a", "nodeSelector": NODE_SELECTOR, "midStaticMemoryReservedPercent": 200}]}),
     "colocation-config: nodeConfigs[0].midStaticMemoryReservedPercent: Input should be less than or equal to 100 "
     "(got 200)"),
    (cm({"midReclaimMode": "statc"}), "colocation-config: midReclaimMode: Input should be 'static' (got \"statc\")"),
    (cm({"midReclaimMode": 1}), "colocation-config: midReclaimMode: Input should be 'static' (got 1)"),
])
def test_a_bad_mid_value_is_refused_naming_its_key(data: dict[str, Any], error: str) -> None:
    with pytest.raises(SloConfigError) as exc:
        parse_slo_config(data)
    assert str(exc.value) == error


def test_the_mid_keys_are_acted_on_and_a_misspelt_one_warned() -> None:
    notices = key_notices(cm({"midCPUThresholdPercent": 50, "midUnallocatedPrecent": 10}))
    assert [str(n) for n in notices] == ['colocation-config: unknown key "midUnallocatedPrecent" is ignored, did you '
                                         'mean "midUnallocatedPercent"?']
