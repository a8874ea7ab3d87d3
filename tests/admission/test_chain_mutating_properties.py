"""Property: the mutating chain run on its own output gives an empty patch (reinvocationPolicy IfNeeded),
and its output always passes the in-tree Priority plugin when the apiserver reinvokes it."""

from __future__ import annotations

import copy
import os
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tests.mutating import make_state, profile, request
from webhook.admission import chain
from webhook.cluster.state import ClusterState
from webhook.core.priority import resolve_priority

KEYS = st.sampled_from(["app", "tier", "team", "x", "koordinator.sh/qosClass"])
VALUES = st.sampled_from(["web", "batch", "a", "b", "1", ""])
SUFFIX = st.sampled_from(["-be", "-a", "-b", "x"])
CLASSES = st.sampled_from(["koord-prod", "koord-mid", "koord-batch", "koord-free", "system-cluster-critical"])
QUANTITY = st.sampled_from(["1", "500m", "1.5", "100u", "2k", "1Gi", "512Mi", "1000", "3"])

selector = st.one_of(
    st.none(),
    st.fixed_dictionaries({"matchLabels": st.dictionaries(KEYS, VALUES, max_size=2)}),
    st.fixed_dictionaries({"matchExpressions": st.lists(st.one_of(
        st.fixed_dictionaries({"key": KEYS, "operator": st.sampled_from(["In", "NotIn"]),
                               "values": st.lists(VALUES, min_size=1, max_size=2)}),
        st.fixed_dictionaries({"key": KEYS, "operator": st.sampled_from(["Exists", "DoesNotExist"])})),
        max_size=2)}),
)

container_patch = st.fixed_dictionaries({"name": st.sampled_from(["app", "side"])}, optional={
    "image": st.sampled_from(["nginx", "busybox"]),
    "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["A", "B"]), "value": VALUES}), max_size=2),
    "resources": st.fixed_dictionaries({}, optional={"requests": st.dictionaries(
        st.sampled_from(["cpu", "memory"]), QUANTITY, max_size=2)}),
})
patch = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "labels": st.dictionaries(KEYS, st.one_of(st.none(), VALUES), max_size=2),
        "annotations": st.dictionaries(st.sampled_from(["n1", "n2"]), st.one_of(st.none(), VALUES), max_size=2)}),
    "spec": st.fixed_dictionaries({}, optional={"containers": st.lists(container_patch, max_size=2),
                                                "overhead": st.dictionaries(st.sampled_from(["cpu", "memory"]),
                                                                            QUANTITY, max_size=2)}),
})

profile_spec = st.fixed_dictionaries({}, optional={
    "namespaceSelector": st.sampled_from([None, None, None, {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                                          {"matchLabels": {"team": "prod"}}]),
    "selector": selector,
    "probability": st.sampled_from([None, None, None, 0, 30, "50%", 100, "100%"]),
    "labels": st.dictionaries(KEYS, VALUES, max_size=2),
    "annotations": st.dictionaries(st.sampled_from(["n1", "n2"]), VALUES, max_size=2),
    "labelKeysMapping": st.dictionaries(KEYS, KEYS, max_size=2),
    "annotationKeysMapping": st.dictionaries(st.sampled_from(["n1", "n2"]), st.sampled_from(["n1", "n3"]), max_size=1),
    "labelSuffixes": st.dictionaries(KEYS, SUFFIX, max_size=2),
    "schedulerName": st.sampled_from(["", "koord-scheduler"]),
    "qosClass": st.sampled_from(["", "BE", "LS"]),
    "priorityClassName": st.one_of(st.just(""), CLASSES),
    "koordinatorPriority": st.integers(0, 2000),
    "patch": patch,
})

profiles = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), profile_spec, st.booleans()),
                    min_size=1, max_size=4, unique_by=lambda t: t[0])

resources = st.fixed_dictionaries({}, optional={
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu"]), QUANTITY, max_size=3),
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITY, max_size=2),
})

pod_level = st.fixed_dictionaries({}, optional={
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "hugepages-2Mi"]), QUANTITY, max_size=3),
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITY, max_size=2),
})


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    ns = draw(st.sampled_from(["default", "colo-demo", "prod-apps"]))
    cls = draw(st.one_of(st.none(), CLASSES))
    value = {"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000, "koord-free": 3000,
             "system-cluster-critical": 2000000000}.get(cls or "", 0)
    meta: dict[str, Any] = {"namespace": ns, "labels": draw(st.dictionaries(KEYS, VALUES, max_size=3))}
    if draw(st.booleans()):
        meta["name"] = draw(st.sampled_from(["p1", "p2", "p3", "web-0"]))
    else:
        meta["generateName"] = draw(st.sampled_from(["web-", "job-abc-"]))
    if draw(st.booleans()):
        meta["annotations"] = draw(st.dictionaries(st.sampled_from(["n1", "alibabacloud.com/qosClass"]), VALUES,
                                                   max_size=2))
    containers: list[dict[str, Any]] = [{"name": "app", "image": "nginx", "resources": draw(resources)}]
    if draw(st.booleans()):
        containers.append({"name": "side", "image": "busybox", "resources": draw(resources)})
    spec: dict[str, Any] = {"containers": containers, "priority": value, "preemptionPolicy": "PreemptLowerPriority"}
    if cls:
        spec["priorityClassName"] = cls
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": draw(resources)}]
        if draw(st.booleans()):  # a native sidecar
            spec["initContainers"][0]["restartPolicy"] = "Always"
    if draw(st.booleans()):  # pod-level resources (spec.resources), on by default since 1.34
        spec["resources"] = draw(pod_level)
    if draw(st.booleans()):  # a RuntimeClass's overhead
        spec["overhead"] = draw(st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITY, min_size=1))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _state(specs: list[tuple[str, dict[str, Any], bool]]) -> ClusterState:
    objs = []
    for name, drawn, skip in specs:
        spec = {k: v for k, v in drawn.items() if v is not None}
        objs.append(profile(name, {"config.koordinator.sh/skip-update-resources": "true"} if skip else None, **spec))
    return make_state(*objs)


@settings(max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pod=pods(), specs=profiles)
def test_chain_on_its_own_output_is_a_no_op(pod: dict[str, Any], specs: list[tuple[str, dict[str, Any], bool]]) -> None:
    state = _state(specs)
    first = chain.mutate(request(copy.deepcopy(pod)), state, chain.Settings())
    assert not first.rule_failed, first.warnings
    if not first.allowed:
        event("denied")
        return  # a denial (unknown class) has no output to feed back
    # profiles that undo each other cannot settle; the webhook says so (tested separately)
    settled = not any("did not settle" in w for w in first.warnings)
    event(f"settled: {settled}")
    assume(settled)
    event(f"profiles applied: {bool(first.audit_annotations.get('colocation-profile'))}")
    event(f"batch converted: {bool(first.audit_annotations.get('batch-resources'))}")
    out = jsonpatch.apply_patch(pod, first.patch)  # the ops are valid RFC 6902 against the input
    second = chain.mutate(request(copy.deepcopy(out)), state, chain.Settings())
    assert second.allowed, second.message
    assert second.patch == [], (first.patch, second.patch)
    # the apiserver's reinvoked Priority plugin accepts what we return
    assert resolve_priority(out["spec"], state.priority_class, state.default_priority_class()).error is None
