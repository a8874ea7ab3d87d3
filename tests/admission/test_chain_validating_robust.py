"""Property: the validating chain answers every pod-shaped input with a decision, never an internal error."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.validating_helpers import request, state
from webhook.admission import chain

QUANTITY = st.one_of(st.sampled_from(["500", "1k", "0.5", "500m", "-1", "1Gi", "abc", "", "1e3", "0"]),
                     st.integers(-5, 5000), st.none(), st.lists(st.integers(), max_size=1))
NAMES = st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory",
                         "example.com/gpu", "hugepages-2Mi"])
RESOURCES = st.one_of(st.dictionaries(NAMES, QUANTITY, max_size=4), st.none(), st.text(max_size=3))
CONTAINER = st.fixed_dictionaries({"name": st.text(max_size=5)},
                                  optional={"resources": st.one_of(
                                      st.fixed_dictionaries({}, optional={"requests": RESOURCES, "limits": RESOURCES}),
                                      st.integers())})
LABELS = st.one_of(st.dictionaries(st.sampled_from(["koordinator.sh/qosClass", "koordinator.sh/priority",
                                                    "koordinator.sh/priority-class"]),
                                   st.sampled_from(["BE", "LSR", "LSE", "LS", "koord-prod", "x", ""]), max_size=3),
                   st.none(), st.integers())
POD = st.fixed_dictionaries({
    "metadata": st.one_of(st.fixed_dictionaries({"namespace": st.just("ns")}, optional={"labels": LABELS}),
                          st.none(), st.text(max_size=2)),
    "spec": st.one_of(st.fixed_dictionaries({}, optional={
        "containers": st.one_of(st.lists(CONTAINER, max_size=3), st.text(max_size=2)),
        "initContainers": st.lists(CONTAINER, max_size=2),
        "overhead": RESOURCES,
        "priority": st.one_of(st.integers(-10, 10000), st.text(max_size=2), st.none()),
        "priorityClassName": st.one_of(st.sampled_from(["koord-prod", "high", ""]), st.none()),
        "activeDeadlineSeconds": st.one_of(st.integers(-5, 5), st.none()),
    }), st.none(), st.text(max_size=2)),
})
LIMITED = [{"resource": "pods", "matchContains": ["cpu"],
            "matchScopes": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": ["x"]},
                            {"scopeName": "BestEffort", "operator": "Exists"}]}]
QUOTA = {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "ns"},
         "spec": {"hard": {"cpu": "1"}, "scopeSelector": {"matchExpressions": [
             {"scopeName": "PriorityClass", "operator": "Exists"}]}}}


JUNK_QUOTAS = [
    {"kind": "ResourceQuota", "metadata": {"name": "j1", "namespace": "ns"}, "spec": "x", "status": []},
    {"kind": "ResourceQuota", "metadata": {"name": "j2", "namespace": "ns"},
     "spec": {"hard": ["cpu"], "scopes": "BestEffort", "scopeSelector": {"matchExpressions": [
         {"scopeName": "PriorityClass", "operator": "Equals", "values": "x"}, "junk"]}}},
]


@settings(max_examples=300, deadline=None)
@given(POD, POD, st.sampled_from(["CREATE", "UPDATE"]))
def test_validate_never_errors(pod: dict[str, Any], old: dict[str, Any], op: str) -> None:
    d = chain.validate(request(pod, op, old if op == "UPDATE" else None), state(QUOTA, *JUNK_QUOTAS),
                       chain.Settings(limited_resources=LIMITED))
    assert not d.rule_failed and d.code != 500, d.message
    assert d.allowed or d.message
