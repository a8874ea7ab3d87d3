"""webhook.core: strategic merge, profile compilation, probability and batch arithmetic (pure functions)."""

from __future__ import annotations

import copy

import pytest

from webhook.admission.domain.batch_resources import convert_resources, targets_for
from webhook.admission.domain.colocation_profile import suffix_tails
from webhook.admission.domain.strategic_merge import StrategicMergeError, merge
from webhook.cluster.profiles import compile_profile
from webhook.core.extended_resource_spec import (
    extended_resource_spec,
    parse_extended_resource_spec,
    same_extended_resource_spec,
)
from webhook.core.quantity import canonical
from webhook.core.selectors import compile_selector, describe_selector, matches

POD = {"metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
       "spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                                "volumeMounts": [{"name": "v", "mountPath": "/data"}]}],
                "tolerations": [{"key": "t", "operator": "Exists"}]}}

MERGE_CASES = [
    ("map merge", {"metadata": {"labels": {"b": "2"}}}, lambda r: r["metadata"]["labels"] == {"a": "1", "b": "2"}),
    ("null deletes", {"metadata": {"labels": {"a": None}}}, lambda r: r["metadata"]["labels"] == {}),
    ("containers merge by name", {"spec": {"containers": [{"name": "app", "image": "busybox"}]}},
     lambda r: r["spec"]["containers"][0] == {**POD["spec"]["containers"][0], "image": "busybox"}),
    ("new container appended", {"spec": {"containers": [{"name": "side", "image": "b"}]}},
     lambda r: [c["name"] for c in r["spec"]["containers"]] == ["app", "side"]),
    ("env merges by name", {"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}]}]}},
     lambda r: [e["name"] for e in r["spec"]["containers"][0]["env"]] == ["A", "B"]),
    ("volumeMounts merge by mountPath",
     {"spec": {"containers": [{"name": "app", "volumeMounts": [{"mountPath": "/data", "readOnly": True}]}]}},
     lambda r: r["spec"]["containers"][0]["volumeMounts"] == [{"name": "v", "mountPath": "/data", "readOnly": True}]),
    ("$patch delete list item", {"spec": {"containers": [{"name": "app", "$patch": "delete"}]}},
     lambda r: r["spec"]["containers"] == []),
    ("$patch replace map", {"metadata": {"labels": {"$patch": "replace", "z": "9"}}},
     lambda r: r["metadata"]["labels"] == {"z": "9"}),
    ("other lists are replaced", {"spec": {"tolerations": [{"key": "u", "operator": "Exists"}]}},
     lambda r: r["spec"]["tolerations"] == [{"key": "u", "operator": "Exists"}]),
    ("finalizers are a set", {"metadata": {"finalizers": ["x", "y"]}},
     lambda r: r["metadata"]["finalizers"] == ["x", "y"]),
    ("nulls dropped from new values", {"spec": {"nodeSelector": {"a": "1", "b": None}}},
     lambda r: r["spec"]["nodeSelector"] == {"a": "1"}),
]


@pytest.mark.parametrize("name,patch,check", MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_strategic_merge(name, patch, check) -> None:  # type: ignore[no-untyped-def]
    before = copy.deepcopy(POD)
    result = merge(POD, patch)
    assert check(result)
    assert before == POD  # pure
    assert merge(result, patch) == result  # idempotent


def test_strategic_merge_shares_untouched_subtrees_and_copies_patch_values() -> None:
    patch = {"metadata": {"labels": {"b": "2"}}, "spec": {"nodeSelector": {"x": "y"}}}
    result = merge(POD, patch)
    assert result["spec"]["containers"] is POD["spec"]["containers"]
    result["spec"]["nodeSelector"]["x"] = "changed"
    assert patch["spec"]["nodeSelector"] == {"x": "y"}


def test_strategic_merge_errors_name_the_field() -> None:
    with pytest.raises(StrategicMergeError, match=r"spec.containers\[0\]: does not contain declared merge key: name"):
        merge(POD, {"spec": {"containers": [{"image": "x"}]}})
    with pytest.raises(StrategicMergeError, match="unsupported \\$patch directive 'explode'"):
        merge(POD, {"spec": {"$patch": "explode"}})


def test_suffix_tails() -> None:
    ps = [compile_profile({"metadata": {"name": n}, "spec": {"labelSuffixes": s}})
          for n, s in (("a", {"k": "-a"}), ("b", {"k": "-b", "j": "-j"}), ("c", {"k": "-c"}))]
    assert suffix_tails(ps) == [{"k": "-b-c", "j": "-j"}, {"k": "-c"}, {}]


@pytest.mark.parametrize("selector,labels", [
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]}, {"a": "1"}),
    ({"matchExpressions": [{"key": "b", "operator": "In", "values": ["x", "y"]}]}, {"b": "y"}),
    ({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}, {"b": "y"}),
    ({"matchExpressions": [{"key": "b", "operator": "Exists"}]}, {}),
])
def test_compiled_selector_agrees_with_matches(selector, labels) -> None:  # type: ignore[no-untyped-def]
    compiled = compile_selector(selector)
    assert compiled is not None and compiled.matches(labels) == matches(selector, labels)


def test_describe_selector() -> None:
    assert describe_selector({"matchLabels": {"a": "1"}, "matchExpressions": [
        {"key": "t", "operator": "In", "values": ["x", "y"]}, {"key": "z", "operator": "DoesNotExist"}]}) == \
        "a=1,t in (x,y),!z"
    assert describe_selector(None) == "<everything>"


def test_batch_arithmetic() -> None:
    assert targets_for(5000) == ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")
    assert targets_for(7999) == ("kubernetes.io/mid-cpu", "kubernetes.io/mid-memory")
    assert targets_for(9000) is None and targets_for(None) is None and targets_for(True) is None
    new, done = convert_resources({"limits": {"cpu": "1.5", "memory": "1Gi"}}, "b-cpu", "b-mem")
    assert new == {"limits": {"b-cpu": "1500", "b-mem": "1073741824"}, "requests": {"b-cpu": "1500", "b-mem": "1073741824"}}
    assert done[:2] == ["limits.cpu", "limits.memory"]
    assert canonical("1000") == "1k" and canonical("1536Mi") == "1536Mi" and canonical("1024Mi") == "1Gi" and canonical("500") == "500"


def test_extended_resource_spec_round_trip() -> None:
    spec = {"containers": [{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000", "cpu": "1"}}},
                           {"name": "b", "resources": {}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"kubernetes.io/batch-cpu": "5"}}}]}
    assert extended_resource_spec(spec) == {"containers": {"a": {"requests": {"kubernetes.io/batch-cpu": "1k"}}}}
    assert same_extended_resource_spec('{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}}',
                                       extended_resource_spec(spec))
    assert not same_extended_resource_spec('{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"2k"}}}}',
                                           extended_resource_spec(spec))
    assert same_extended_resource_spec(None, {}) and not same_extended_resource_spec("{}", extended_resource_spec(spec))
    assert parse_extended_resource_spec("not json") is None
    assert extended_resource_spec({"containers": []}) == {}


def test_indexed_selection_agrees_with_plain_matching() -> None:
    from webhook.admission.domain.colocation_profile import ProfileSet

    selectors = [None, {"matchLabels": {"a": "1"}}, {"matchLabels": {"a": "1", "b": "2"}},
                 {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]},
                 {"matchExpressions": [{"key": "b", "operator": "Exists"}, {"key": "a", "operator": "NotIn",
                                                                            "values": ["1"]}]},
                 {"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]},
                 {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["3"]}]}]
    objs = [{"metadata": {"name": f"p{i}"}, "spec": {"selector": s}} for i, s in enumerate(selectors)]
    view = ProfileSet([compile_profile(o) for o in objs]).for_namespace("ns", {})
    for labels in ({}, {"a": "1"}, {"a": "3", "b": "2"}, {"a": "1", "b": "2", "c": ""}, {"b": "x"}):
        expected = [i for i, s in enumerate(selectors) if matches(s, labels)]
        assert view.select(labels, 0) == expected, labels
