"""A profile's patch as a strategic merge (webhook/admission/domain/strategic_merge.py): pure, idempotent, sharing
what it leaves alone, errors naming the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from webhook.admission.domain.strategic_merge import StrategicMergeError, merge

POD: dict[str, Any] = {"metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
       "spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                                "volumeMounts": [{"name": "v", "mountPath": "/data"}]}],
                "tolerations": [{"key": "t", "operator": "Exists"}]}}

MERGE_CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
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
def test_strategic_merge(name: str, patch: dict[str, Any], check: Callable[[dict[str, Any]], bool]) -> None:
    before = copy.deepcopy(POD)
    result = merge(POD, patch)
    assert check(result)
    assert before == POD  # pure
    assert merge(result, patch) == result  # idempotent


def test_strategic_merge_shares_untouched_subtrees_and_copies_patch_values() -> None:
    patch: dict[str, Any] = {"metadata": {"labels": {"b": "2"}}, "spec": {"nodeSelector": {"x": "y"}}}
    result = merge(POD, patch)
    assert result["spec"]["containers"] is POD["spec"]["containers"]
    result["spec"]["nodeSelector"]["x"] = "changed"
    assert patch["spec"]["nodeSelector"] == {"x": "y"}


def test_strategic_merge_errors_name_the_field() -> None:
    with pytest.raises(StrategicMergeError, match=r"spec.containers\[0\]: does not contain declared merge key: name"):
        merge(POD, {"spec": {"containers": [{"image": "x"}]}})
    with pytest.raises(StrategicMergeError, match="unsupported \\$patch directive 'explode'"):
        merge(POD, {"spec": {"$patch": "explode"}})
