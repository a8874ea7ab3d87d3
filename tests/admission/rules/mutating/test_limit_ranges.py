"""LimitRanges and batch pods: defaults put back are removed on reinvocation, constraints are refused up front.

The apiserver runs LimitRanger before the webhooks and again after this webhook's patch; the second time it adds
its defaults to every container that no longer names cpu or memory (ours, converted) and says so in the
``kubernetes.io/limit-ranger`` annotation. On the reinvocation that follows, the batch conversion removes what
the annotation names next to the batch resource it wrote, whatever the value; anything else stays as before (a
mix the user wrote is still refused).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.mutating import make_state, mutate, namespace, pod, resources_of
from tests.validating_helpers import validate
from webhook.admission.domain.batch_resources import LIMIT_RANGER, limit_ranger_defaults

STATE = make_state(namespace("batch-ns"))
BATCH = {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2147483648"}
SET_BOTH = "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app"


def converted(annotation: str | None, requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    """A koord-batch pod our first pass converted, as LimitRanger hands it back on reinvocation."""
    annotations = {LIMIT_RANGER: annotation} if annotation else {}
    return pod(ns="batch-ns", labels={"koordinator.sh/qosClass": "BE"}, annotations=annotations,
               requests={**BATCH, **requests}, limits={**BATCH, **limits}, priorityClassName="koord-batch",
               priority=5000)


@pytest.mark.parametrize(("text", "expected"), [
    (SET_BOTH, {("containers", "app"): {"requests": {"cpu", "memory"}, "limits": {"cpu", "memory"}}}),
    ("LimitRanger plugin set: cpu request for init container setup; memory limit for container main",
     {("initContainers", "setup"): {"requests": {"cpu"}}, ("containers", "main"): {"limits": {"memory"}}}),
    ("LimitRanger plugin set: ephemeral-storage request for container app",
     {("containers", "app"): {"requests": {"ephemeral-storage"}}}),
    ("set by hand: cpu request for container app", {}),
    ("", {}),
])
def test_the_annotation_is_read_as_limitranger_writes_it(text: str, expected: dict[Any, Any]) -> None:
    assert limit_ranger_defaults({LIMIT_RANGER: text}) == expected
    assert limit_ranger_defaults(None) == {} and limit_ranger_defaults({LIMIT_RANGER: 7}) == {}


@pytest.mark.parametrize(("name", "requests", "limits"), [
    ("defaults unlike the converted values", {"cpu": "100m", "memory": "128Mi"}, {"cpu": "500m", "memory": "1Gi"}),
    ("a defaultRequest derived from min", {"cpu": "10m", "memory": "64Mi"}, {"cpu": "10m", "memory": "64Mi"}),
    ("defaults equal to the converted values", {"cpu": "1", "memory": "2Gi"}, {"cpu": "1", "memory": "2Gi"}),
])
def test_defaults_put_back_are_removed_and_the_pod_passes(name: str, requests: dict[str, str],
                                                          limits: dict[str, str]) -> None:
    obj = converted(SET_BOTH, requests, limits)
    explain: list[str] = []
    decision, out = mutate(obj, STATE, explain)
    assert decision.allowed and out is not None
    assert resources_of(out) == {"requests": BATCH, "limits": BATCH}
    assert any("requests.cpu that LimitRanger set again" in line for line in explain)
    assert validate(out).allowed


def test_only_what_the_annotation_names_goes() -> None:
    """LimitRanger set only the memory limit; the cpu request next to batch-cpu is the user's own mix, and a
    container with a mix is left as written (the validating chain refuses it, naming both)."""
    obj = converted("LimitRanger plugin set: memory limit for container app", {"cpu": "250m"}, {"memory": "1Gi"})
    decision, out = mutate(obj, STATE)
    assert out is not None
    assert resources_of(out) == resources_of(obj)
    assert any('already asks for kubernetes.io/batch-cpu "1000"' in w for w in decision.warnings)
    denial = validate(out)
    assert not denial.allowed and denial.rule == "batch-mixing"


def test_without_the_annotation_a_mix_is_still_refused() -> None:
    obj = converted(None, {"cpu": "100m"}, {})
    _, out = mutate(obj, STATE)
    assert out is not None and resources_of(out)["requests"]["cpu"] == "100m"
    assert validate(out).rule == "batch-mixing"


def test_named_defaults_without_a_batch_value_are_converted_as_ever() -> None:
    """The first pass: LimitRanger's defaults in a container the webhook has not converted yet."""
    obj = pod(ns="batch-ns", labels={"koordinator.sh/qosClass": "BE"}, annotations={LIMIT_RANGER: SET_BOTH},
              requests={"cpu": "100m", "memory": "128Mi"}, limits={"cpu": "500m", "memory": "1Gi"},
              priorityClassName="koord-batch", priority=5000)
    _, out = mutate(copy.deepcopy(obj), STATE)
    assert out is not None
    assert resources_of(out) == {
        "requests": {"kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "134217728"},
        "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1073741824"}}


# -- LimitRanges a batch pod cannot meet ------------------------------------------------------------------------
def limit_range(name: str, *items: dict[str, Any], ns: str = "batch-ns") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name, "namespace": ns},
            "spec": {"limits": list(items)}}


ADVICE = (" (LimitRange {lr} in namespace batch-ns constrains cpu or memory, which a pod with "
          "kubernetes.io/batch-cpu/batch-memory does not name, so LimitRanger would refuse it after the webhooks: "
          "remove min, max and maxLimitRequestRatio on cpu and memory from that LimitRange (default and "
          "defaultRequest are fine), or keep the namespace out of the profile's namespaceSelector)")
NATIVE_POD: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}

RANGES = [
    ("container min cpu", {"type": "Container", "min": {"cpu": "10m"}},
     'pods "p" is forbidden: minimum cpu usage per Container is 10m.  No request is specified'),
    ("container max memory", {"type": "Container", "max": {"memory": "4096Mi"}},
     'pods "p" is forbidden: maximum memory usage per Container is 4Gi.  No limit is specified'),
    ("container ratio", {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
     'pods "p" is forbidden: cpu max limit to request ratio per Container is 2, but no request is specified or '
     "request is 0"),
    ("pod min memory", {"type": "Pod", "min": {"memory": "1Gi"}},
     'pods "p" is forbidden: minimum memory usage per Pod is 1Gi.  No request is specified'),
    ("two constraints", {"type": "Container", "min": {"cpu": "10m"}, "max": {"cpu": "2"}},
     'pods "p" is forbidden: [minimum cpu usage per Container is 10m.  No request is specified, maximum cpu usage '
     "per Container is 2.  No limit is specified]"),
    ("defaults only", {"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}}, None),
    ("constraints on other resources", {"type": "Container", "min": {"ephemeral-storage": "1Gi"}}, None),
    ("a PersistentVolumeClaim limit", {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}}, None),
]


@pytest.mark.parametrize(("name", "item", "message"), RANGES, ids=[r[0] for r in RANGES])
def test_a_limitrange_a_converted_pod_cannot_meet_is_refused_up_front(name: str, item: dict[str, Any],
                                                                     message: str | None) -> None:
    """The pod asks for native cpu/memory and koord-batch: the conversion leaves it none, and the LimitRange
    would refuse it after the webhooks."""
    state = make_state(namespace("batch-ns"), limit_range("limits", item))
    obj = pod(ns="batch-ns", labels={"koordinator.sh/qosClass": "BE"}, priorityClassName="koord-batch",
              priority=5000, **NATIVE_POD)
    explain: list[str] = []
    decision, _ = mutate(obj, state, explain)
    if message is None:
        assert decision.allowed, decision.message
        assert "[limit-ranges] LimitRanges in batch-ns: 1; none constrains cpu or memory" in explain
    else:
        assert (decision.allowed, decision.rule, decision.message) == (False, "limit-ranges",
                                                                       message + ADVICE.format(lr="limits"))


def test_a_pod_that_keeps_cpu_and_memory_is_left_to_limitranger() -> None:
    state = make_state(namespace("batch-ns"), limit_range("limits", {"type": "Container", "min": {"cpu": "10m"}}))
    explain: list[str] = []
    decision, _ = mutate(pod(ns="batch-ns", **NATIVE_POD), state, explain)
    assert decision.allowed
    assert "[limit-ranges] the pod holds no batch resources: LimitRanger's own checks apply as ever" in explain
    other = make_state(namespace("batch-ns"), limit_range("limits", {"type": "Container", "min": {"cpu": "10m"}},
                                                          ns="elsewhere"))
    batch = pod(ns="batch-ns", labels={"koordinator.sh/qosClass": "BE"}, priorityClassName="koord-batch",
                priority=5000, **NATIVE_POD)
    assert mutate(batch, other)[0].allowed   # a LimitRange of another namespace counts for nothing
