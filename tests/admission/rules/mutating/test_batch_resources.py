"""Table tests of the batch-resources rule (webhook/admission/rules/mutating/batch_resources.py): cpu/memory converted
to the band's resources, and the warnings on what converts oddly."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.mutating import (
    labels_of,
    make_state,
    mutate,
    mutated,
    pod,
    priority_class,
    profile,
    request,
    resources_of,
)
from webhook.admission import chain
from webhook.admission.response import Decision
from webhook.cluster.state import ClusterState

ESPEC = "node.koordinator.sh/extended-resource-spec"



# -- batch resources --------------------------------------------------------------------------------------
BATCH_CASES = [
    # (name, priority, requests, limits, expected requests, expected limits)
    ("500m and 512Mi", 5000, {"cpu": "500m", "memory": "512Mi"}, None,
     {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "536870912"}, None),
    ("1 core", 5999, {"cpu": "1"}, {"cpu": "1.5"},
     {"kubernetes.io/batch-cpu": "1000"}, {"kubernetes.io/batch-cpu": "1500"}),
    ("limit without request gets request", 5500, None, {"cpu": "2", "memory": "1Gi"},
     {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1073741824"},
     {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1073741824"}),
    ("sub-milli rounds up", 5000, {"cpu": "100u", "memory": "1k"}, None,
     {"kubernetes.io/batch-cpu": "1", "kubernetes.io/batch-memory": "1000"}, None),
    ("other resources kept", 5000, {"cpu": "1", "ephemeral-storage": "1Gi"}, None,
     {"kubernetes.io/batch-cpu": "1000", "ephemeral-storage": "1Gi"}, None),
    ("mid band", 7000, {"cpu": "250m", "memory": "1Mi"}, None,
     {"kubernetes.io/mid-cpu": "250", "kubernetes.io/mid-memory": "1048576"}, None),
    ("prod band unchanged", 9000, {"cpu": "1"}, None, {"cpu": "1"}, None),
    ("free band unchanged", 3000, {"cpu": "1"}, None, {"cpu": "1"}, None),
    ("no band unchanged", 0, {"cpu": "1"}, None, {"cpu": "1"}, None),
]


@pytest.mark.parametrize("name,prio,requests,limits,want_req,want_lim", BATCH_CASES, ids=[c[0] for c in BATCH_CASES])
def test_batch_resources(name: str, prio: int, requests: dict[str, Any] | None, limits: dict[str, Any] | None,
                         want_req: dict[str, Any], want_lim: dict[str, Any] | None) -> None:
    state = make_state(priority_class("custom", prio))
    decision, out = mutate(pod(requests=requests, limits=limits, priorityClassName="custom", priority=prio), state)
    assert decision.allowed, decision.message
    assert out is not None
    res = resources_of(out)
    assert res.get("requests") == want_req
    assert res.get("limits") == want_lim


def test_batch_covers_init_containers_not_overhead_and_writes_the_annotation() -> None:
    p = pod(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"},
            priorityClassName="koord-batch", priority=5000, overhead={"cpu": "100m", "memory": "10Mi"})
    p["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "50m"}}}]
    decision, out = mutate(p, make_state())
    assert out is not None
    # the RuntimeClass's overhead stays: its admission plugin refuses a pod whose overhead differs from the class's
    assert out["spec"]["overhead"] == {"cpu": "100m", "memory": "10Mi"}
    assert resources_of(out, 0, "initContainers") == {"limits": {"kubernetes.io/batch-cpu": "50"},
                                                       "requests": {"kubernetes.io/batch-cpu": "50"}}
    # Go's encoding of ExtendedResourceSpec: sorted keys, canonical quantities, regular containers only
    assert out["metadata"]["annotations"][ESPEC] == (
        '{"containers":{"app":{"limits":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"1073741824"},'
        '"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"1073741824"}}}}')
    assert decision.audit_annotations["batch-resources"].startswith("cpu/memory -> kubernetes.io/batch-cpu")


def test_skip_update_resources_turns_conversion_off() -> None:
    state = make_state(profile("colo", meta_annotations={"config.koordinator.sh/skip-update-resources": ""},
                               priorityClassName="koord-batch", qosClass="BE"))
    out = mutated(pod(requests={"cpu": "1"}), state)
    assert out["spec"]["priority"] == 5000 and resources_of(out) == {"requests": {"cpu": "1"}}


def test_batch_conversion_without_a_profile_and_existing_annotation_kept() -> None:
    p = pod(requests={"kubernetes.io/batch-cpu": "1k"}, priorityClassName="koord-batch", priority=5000,
            annotations={ESPEC: '{"containers":{"app":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}}'})
    decision, _out = mutate(p, make_state())
    assert decision.patch == []


def test_legacy_ack_qos_annotation_counts_as_be() -> None:
    p = pod(annotations={"alibabacloud.com/qosClass": "BE"}, requests={"cpu": "1"})
    decision, out = mutate(p, make_state())
    assert out is not None
    assert resources_of(out) == {"requests": {"cpu": "1"}}
    assert any("QoS BE pod with priority 0 keeps cpu/memory" in w for w in decision.warnings)


# -- batch resources: values that are no quantity (issue 9 §4) -------------------------------------------
FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
REQ0 = "spec.containers[0].resources.requests"
INVALID_CASES = [
    # (name, priority, requests, limits, message)
    ("cpu abc: memory not converted either", 5000, {"cpu": "abc", "memory": "1Gi"}, None,
     f'{REQ0}[cpu]: Invalid value: "abc": {FORMAT}'),
    ("cpu 1e3m", 5000, {"cpu": "1e3m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"},
     f'{REQ0}[cpu]: Invalid value: "1e3m": {FORMAT}'),
    ("bad numeric part in limits", 5000, {"cpu": "1"}, {"memory": "1.1.M"},
     'spec.containers[0].resources.limits[memory]: Invalid value: "1.1.M": unable to parse numeric part of quantity'),
    ("bad suffix, mid band", 7000, {"cpu": "1ki"}, None,
     f'{REQ0}[cpu]: Invalid value: "1ki": unable to parse quantity\'s suffix'),
    ("every one listed", 5000, {"cpu": "x", "memory": "y"}, None,
     f'[{REQ0}[cpu]: Invalid value: "x": {FORMAT}, {REQ0}[memory]: Invalid value: "y": {FORMAT}]'),
    ("a pod that is not converted is denied too", 9000, {"cpu": "abc"}, None,
     f'{REQ0}[cpu]: Invalid value: "abc": {FORMAT}'),
]


@pytest.mark.parametrize("name,prio,requests,limits,message", INVALID_CASES, ids=[c[0] for c in INVALID_CASES])
def test_invalid_quantity_is_denied_and_nothing_converted(name: str, prio: int, requests: dict[str, Any], limits: dict[str, Any] | None,
                                                          message: str) -> None:
    p = pod(requests=requests, limits=limits, priorityClassName="custom", priority=prio)
    req = request(p)
    decision = chain.mutate(req, make_state(priority_class("custom", prio)), chain.Settings())
    assert (decision.allowed, decision.code, decision.reason, decision.rule, decision.message) == \
        (False, 400, "BadRequest", "batch-resources", message)
    assert decision.patch == [] and req.object == p  # nothing converted, the input as it came


def test_invalid_quantity_in_init_container_and_overhead() -> None:
    p = pod(requests={"cpu": "1"}, priorityClassName="koord-batch", priority=5000, overhead={"cpu": "1.2.3"})
    p["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "resources": {"limits": {"memory": "1 Gi"}}}]
    decision, _ = mutate(p, make_state())
    assert decision.message == (f'[spec.initContainers[0].resources.limits[memory]: Invalid value: "1 Gi": {FORMAT}, '
                                'spec.overhead[cpu]: Invalid value: "1.2.3": unable to parse numeric part of quantity]')


# -- batch resources: cpu values that read oddly (issue 9 §4) -----------------------------------------------
def admit_both(p: dict[str, Any],
               state: ClusterState | None = None) -> tuple[Decision, dict[str, Any], Decision, list[str]]:
    """The mutating chain, then the validating chain on its output, as the apiserver runs them:
    (mutating decision, output pod, validating decision, every warning the user sees)."""
    from tests.validating_helpers import request as vrequest

    state = state or make_state()
    decision, out = mutate(p, state)
    assert decision.allowed, decision.message
    assert out is not None
    checked = chain.validate(vrequest(out), state, chain.Settings())
    return decision, out, checked, decision.warnings + checked.warnings


ODD_CPU_CASES = [
    # (name, priority, cpu, converted name, converted value, warning or None)
    ("memory unit Mi", 5000, "100Mi", "kubernetes.io/batch-cpu", "104857600000",
     'container "app": requests.cpu "100Mi" is in memory units: batch-cpu 104857600000 (104857600 cores)'),
    ("memory unit Ki", 5000, "1Ki", "kubernetes.io/batch-cpu", "1024000",
     'container "app": requests.cpu "1Ki" is in memory units: batch-cpu 1024000 (1024 cores)'),
    ("memory unit, mid band", 7000, "1Gi", "kubernetes.io/mid-cpu", "1073741824000",
     'container "app": requests.cpu "1Gi" is in memory units: mid-cpu 1073741824000 (1073741824 cores)'),
    ("half a milli-core", 5000, "0.5m", "kubernetes.io/batch-cpu", "1",
     'container "app": requests.cpu "0.5m" is not whole milli-cores: batch-cpu 1 (rounded up)'),
    ("micro-cores", 5000, "100u", "kubernetes.io/batch-cpu", "1",
     'container "app": requests.cpu "100u" is not whole milli-cores: batch-cpu 1 (rounded up)'),
    ("a fraction above one", 5000, "1.0005", "kubernetes.io/batch-cpu", "1001",
     'container "app": requests.cpu "1.0005" is not whole milli-cores: batch-cpu 1001 (rounded up)'),
    ("decimal suffix is plain", 5000, "2k", "kubernetes.io/batch-cpu", "2000000", None),
    ("milli-cores are plain", 5000, "50m", "kubernetes.io/batch-cpu", "50", None),
]


@pytest.mark.parametrize("name,prio,cpu,target,value,warning", ODD_CPU_CASES, ids=[c[0] for c in ODD_CPU_CASES])
def test_odd_cpu_gets_a_warning_saying_what_it_becomes(name: str, prio: int, cpu: str, target: str, value: str,
                                                       warning: str | None) -> None:
    state = make_state(priority_class("custom", prio))
    p = pod(requests={"cpu": cpu}, priorityClassName="custom", priority=prio, labels={"koordinator.sh/qosClass": "BE"})
    _decision, out, checked, warnings = admit_both(p, state)
    assert resources_of(out)["requests"] == {target: value}
    assert checked.allowed, checked.message
    notes = [w for w in warnings if not w.startswith("converted cpu/memory")]
    assert notes == ([warning] if warning else [])
    assert all(len(w) < 120 for w in warnings)
    # the advice never guesses cores for what the user wrote as milli-cores (or less)
    assert not any("did you mean" in w or " 1k" in w or "50k" in w for w in warnings)


ODD_MEMORY_CASES = [
    # (name, priority, memory, converted name, converted value, warning or None): worded as the cpu rounding
    ("milli-bytes", 5000, "100m", "kubernetes.io/batch-memory", "1",
     'container "app": requests.memory "100m" is not whole bytes: batch-memory 1 (rounded up)'),
    ("half a byte above one", 5000, "1.5", "kubernetes.io/batch-memory", "2",
     'container "app": requests.memory "1.5" is not whole bytes: batch-memory 2 (rounded up)'),
    ("mid band", 7000, "0.5k", "kubernetes.io/mid-memory", "500", None),
    ("a fraction of a byte, mid band", 7000, "1.0001k", "kubernetes.io/mid-memory", "1001",
     'container "app": requests.memory "1.0001k" is not whole bytes: mid-memory 1001 (rounded up)'),
    ("binary suffix is whole", 5000, "512Mi", "kubernetes.io/batch-memory", "536870912", None),
]


@pytest.mark.parametrize("name,prio,memory,target,value,warning", ODD_MEMORY_CASES,
                         ids=[c[0] for c in ODD_MEMORY_CASES])
def test_fractional_memory_gets_the_rounding_warning(name: str, prio: int, memory: str, target: str, value: str,
                                                     warning: str | None) -> None:
    state = make_state(priority_class("custom", prio))
    p = pod(requests={"memory": memory}, limits={"memory": memory}, priorityClassName="custom", priority=prio,
            labels={"koordinator.sh/qosClass": "BE"})
    _decision, out, checked, warnings = admit_both(p, state)
    assert checked.allowed, checked.message
    assert resources_of(out)["requests"] == {target: value}
    notes = [w for w in warnings if not w.startswith("converted cpu/memory")]
    where = warning.split(": ", 1) if warning else None
    # requests and limits each say so, with the container and field named
    assert notes == ([warning, f"{where[0]}: limits.{where[1][len('requests.'):]}"] if where else [])
    assert all(len(w) < 120 for w in warnings)


# -- batch resources: a small batch-cpu the user wrote ---------------------------------------------------
SMALL_CASES = [
    ("2", ['container "app": batch-cpu "2" is 2 milli-cores, under a tenth of a core; for 2 cores write 2k']),
    ("1", ['container "app": batch-cpu "1" is 1 milli-core, under a tenth of a core; for 1 core write 1k']),
    ("99", ['container "app": batch-cpu "99" is 99 milli-cores, under a tenth of a core; for 99 cores write 99k']),
    ("100", []),
    ("0", []),
]


@pytest.mark.parametrize("value,warnings", SMALL_CASES, ids=[c[0] for c in SMALL_CASES])
def test_small_batch_cpu_written_by_the_user_warns_once(value: str, warnings: list[str]) -> None:
    p = pod(requests={"kubernetes.io/batch-cpu": value}, limits={"kubernetes.io/batch-cpu": value},
            priorityClassName="koord-batch", priority=5000, labels={"koordinator.sh/qosClass": "BE"})
    _decision, _out, checked, seen = admit_both(p)
    assert checked.allowed and seen == warnings  # once, though requests and limits both say it


def test_small_batch_cpu_warning_of_a_long_container_name_is_truncated() -> None:
    p = pod(requests={"kubernetes.io/batch-cpu": "5"}, priorityClassName="koord-batch", priority=5000)
    p["spec"]["containers"][0]["name"] = "x" * 63
    decision, _ = mutate(p, make_state())
    assert len(decision.warnings) == 1 and len(decision.warnings[0]) < 120


# -- batch resources: koordinator.sh/qosClass BE for a converted koord-batch pod (issue 9 §5) -----------------
QOS_CASES = [
    # (name, pod kwargs, expected label value (None: no label), allowed by the validating chain)
    ("no QoS: BE set", {}, "BE", True),
    ("label LS kept", {"labels": {"koordinator.sh/qosClass": "LS"}}, "LS", False),
    ("unknown label value kept", {"labels": {"koordinator.sh/qosClass": "be"}}, "be", False),
    ("legacy annotation BE counts", {"annotations": {"alibabacloud.com/qosClass": "BE"}}, None, True),
    ("legacy annotation LS counts", {"annotations": {"alibabacloud.com/qosClass": "LS"}}, None, False),
    ("koord-mid has no QoS class of its own", {"priorityClassName": "koord-mid", "priority": 7000}, None, True),
    ("nothing to convert: no label", {"requests": {}}, None, True),
    ("user-written batch resources only: not converted, no label",
     {"requests": {"kubernetes.io/batch-cpu": "1k"}}, None, False),
]


@pytest.mark.parametrize("name,kwargs,label,valid", QOS_CASES, ids=[c[0] for c in QOS_CASES])
def test_converted_batch_pod_without_qos_gets_be(name: str, kwargs: dict[str, Any], label: str | None, valid: bool) -> None:
    fields = {"requests": {"cpu": "500m", "memory": "1Gi"}, "priorityClassName": "koord-batch", "priority": 5000,
              **kwargs}
    p = pod(**fields)
    req = request(p)
    state = make_state()
    decision = chain.mutate(req, state, chain.Settings())
    assert req.object == p  # the input is never changed
    out = jsonpatch.apply_patch(p, decision.patch)
    assert labels_of(out).get("koordinator.sh/qosClass") == label
    said = any("set koordinator.sh/qosClass=BE" in w for w in decision.warnings)
    assert said is (label == "BE" and not kwargs)
    if said:
        assert decision.audit_annotations["batch-resources"].endswith("; set koordinator.sh/qosClass=BE")
    assert chain.mutate(request(out), state, chain.Settings()).patch == []  # a fixpoint
    assert chain.validate(request(out), state, chain.Settings()).allowed is valid


def test_skip_update_resources_sets_no_qos_label() -> None:
    skip = make_state(profile("colo", meta_annotations={"config.koordinator.sh/skip-update-resources": ""},
                              priorityClassName="koord-batch"))
    out = mutated(pod(requests={"cpu": "1"}), skip)
    assert "koordinator.sh/qosClass" not in labels_of(out)  # not converted: cpu is allowed without BE


@pytest.mark.parametrize("operator,seen,copied", [("Exists", True, "BE"), ("In", True, "BE"),
                                                  ("DoesNotExist", True, "")])
def test_profiles_reading_the_qos_label_see_the_be_label_in_the_same_request(operator: str, seen: bool,
                                                                             copied: str) -> None:
    # The label is set after the profiles ran: the chain runs once more, so that a reinvocation on its
    # answer (reinvocationPolicy IfNeeded) does not apply these profiles then.
    expr: dict[str, Any] = {"key": "koordinator.sh/qosClass", "operator": operator}
    if operator == "In":
        expr["values"] = ["BE"]
    state = make_state(profile("reads-qos", selector={"matchExpressions": [expr]}, labels={"seen": "yes"},
                               labelKeysMapping={"koordinator.sh/qosClass": "copied-qos"}))
    p = pod(requests={"cpu": "1"}, priorityClassName="koord-batch", priority=5000)
    out = mutated(p, state)
    assert labels_of(out)["koordinator.sh/qosClass"] == "BE"
    assert (labels_of(out).get("seen") == "yes") is seen
    assert labels_of(out).get("copied-qos") == copied
    assert chain.mutate(request(out), state, chain.Settings()).patch == []


@pytest.mark.parametrize("profiles,passes", [
    ([], 1), ([profile("reads-app", selector={"matchLabels": {"app": "x"}})], 1),
    ([profile("suffixes-qos", labelSuffixes={"koordinator.sh/qosClass": "-x"})], 2),
    ([profile("selects-qos", selector={"matchExpressions": [
        {"key": "koordinator.sh/qosClass", "operator": "DoesNotExist"}]}, labels={"x": "y"})], 2)])
def test_the_chain_runs_again_only_when_a_profile_reads_the_qos_label(profiles: list[Any], passes: int) -> None:
    explain: list[str] = []
    out = mutated(pod(requests={"cpu": "1"}, priorityClassName="koord-batch", priority=5000),
                  make_state(*profiles), explain)
    assert labels_of(out)["koordinator.sh/qosClass"].startswith("BE")  # the suffix profile appends to it
    assert sum(line.startswith("[chain] pass ") for line in explain) == passes - 1


# -- batch resources: a container that already asks for the band's resources (issue 9 §5) ------------------
MIXING_NOTE = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
               "or native cpu and memory, not both")
ALREADY_CASES = [
    # (name, priority, requests, limits, overhead, want requests, warning, validating denial or None)
    ("batch-cpu 500 and cpu 2: both kept", 5000, {"kubernetes.io/batch-cpu": "500", "cpu": "2", "memory": "1Gi"},
     None, None, {"kubernetes.io/batch-cpu": "500", "cpu": "2", "memory": "1Gi"},
     'container "app" already asks for kubernetes.io/batch-cpu "500": its cpu/memory are not converted',
     f'container "app" asks for both kubernetes.io/batch-cpu and cpu: {MIXING_NOTE}'),
    ("batch-memory in limits above the memory limit", 5000, {"memory": "1Gi"},
     {"kubernetes.io/batch-memory": "2Gi", "memory": "1Gi"}, None, {"memory": "1Gi"},
     'container "app" already asks for kubernetes.io/batch-memory "2Gi": its cpu/memory are not converted',
     f'container "app" asks for both kubernetes.io/batch-memory and memory: {MIXING_NOTE}'),
    ("batch-cpu 0 asks for nothing: converted", 5000, {"kubernetes.io/batch-cpu": "0", "cpu": "2"}, None, None,
     {"kubernetes.io/batch-cpu": "2000"}, None, None),
    ("the same value (our own output, a profile patch again): converted", 5000,
     {"kubernetes.io/batch-cpu": "2k", "cpu": "2", "kubernetes.io/batch-memory": "1Gi", "memory": "1073741824"},
     None, None, {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1073741824"}, None, None),
    ("batch-memory limit, memory request: nothing written over", 5000, {"memory": "1Gi"},
     {"kubernetes.io/batch-memory": "2Gi"}, None, {"kubernetes.io/batch-memory": "1073741824"}, None, None),
    ("mid-cpu 500 and cpu 2 in the mid band: both kept", 7000, {"kubernetes.io/mid-cpu": "500", "cpu": "2"}, None,
     None, {"kubernetes.io/mid-cpu": "500", "cpu": "2"},
     'container "app" already asks for kubernetes.io/mid-cpu "500": its cpu/memory are not converted', None),
    ("mid-memory in the mid band", 7000, {"kubernetes.io/mid-memory": "1Gi", "memory": "2Gi"}, None,
     None, {"kubernetes.io/mid-memory": "1Gi", "memory": "2Gi"},
     'container "app" already asks for kubernetes.io/mid-memory "1Gi": its cpu/memory are not converted', None),
    ("overhead is the RuntimeClass's: not converted, no mix", 5000, {"kubernetes.io/batch-cpu": "1k"}, None,
     {"kubernetes.io/batch-cpu": "100", "cpu": "250m"}, {"kubernetes.io/batch-cpu": "1k"}, None, None),
]


@pytest.mark.parametrize("name,prio,requests,limits,overhead,want,warning,denial", ALREADY_CASES,
                         ids=[c[0] for c in ALREADY_CASES])
def test_container_already_asking_for_band_resources_is_not_converted(
        name: str, prio: int, requests: dict[str, Any], limits: dict[str, Any] | None,
        overhead: dict[str, Any] | None, want: dict[str, Any], warning: str | None, denial: str | None) -> None:
    state = make_state(priority_class("custom", prio))
    extra: dict[str, Any] = {"overhead": overhead} if overhead else {}
    p = pod(requests=requests, limits=limits, priorityClassName="custom", priority=prio,
            labels={"koordinator.sh/qosClass": "BE" if prio == 5000 else "LS"}, **extra)
    decision, out = mutate(p, state)
    assert decision.allowed
    assert out is not None
    assert resources_of(out)["requests"] == want
    assert (warning in decision.warnings) if warning else not any("already asks" in w for w in decision.warnings)
    checked = chain.validate(request(out), state, chain.Settings())
    if denial is None:
        assert checked.allowed, checked.message
    else:
        assert (checked.allowed, checked.rule, checked.message) == (False, "batch-mixing", denial)
    assert chain.mutate(request(out), state, chain.Settings()).patch == []


def test_only_the_container_asking_for_batch_is_left_alone() -> None:
    p = pod(requests={"kubernetes.io/batch-cpu": "500"}, priorityClassName="koord-batch", priority=5000)
    p["spec"]["containers"].append({"name": "side", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}})
    _decision, out, checked, _ = admit_both(p)
    assert resources_of(out, 1) == {"requests": {"kubernetes.io/batch-cpu": "100"}}
    assert labels_of(out)["koordinator.sh/qosClass"] == "BE"
    assert checked.allowed, checked.message


def test_update_is_allowed_unchanged() -> None:
    state = make_state(profile("colo", labels={"x": "1"}, priorityClassName="koord-batch"))
    old = pod(requests={"cpu": "1"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"y": "z"}
    decision = chain.mutate(request(new, "UPDATE", old), state, chain.Settings())
    assert decision.allowed and decision.patch == [] and not decision.warnings
