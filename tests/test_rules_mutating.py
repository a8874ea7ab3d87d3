"""Table tests of the mutating chain: colocation profiles -> priority -> batch resources."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest
from msgspec.structs import replace

from tests.conftest import load_fixture
from tests.mutating import (
    labels_of,
    make_state,
    mutate,
    namespace,
    pod,
    priority_class,
    profile,
    request,
    resources_of,
)
from webhook.admission import chain
from webhook.admission.domain.profiles import DRAW_ANNOTATION, probability_draw
from webhook.admission.review import review_from_dict
from webhook.core.priority import resolve_priority

COLO = {"koordinator.sh/enable-colocation": "true"}
ESPEC = "node.koordinator.sh/extended-resource-spec"


def _name_with_draw(ns: str, want_below: int, below: bool) -> str:
    """A pod name whose probability draw is below (or not below) ``want_below``."""
    for i in range(1000):
        name = f"pod-{i}"
        if (probability_draw(ns, name) < want_below) == below:
            return name
    raise AssertionError("no name found")


# -- colocation profiles: matching --------------------------------------------------------------------
MATCH_CASES = [
    # (name, profile spec, pod kwargs, expect match, expected warning fragment or None)
    ("no selectors matches everything", {}, {}, True, None),
    ("namespaceSelector matches", {"namespaceSelector": {"matchLabels": COLO}}, {"ns": "colo-demo"}, True, None),
    ("namespaceSelector does not match", {"namespaceSelector": {"matchLabels": COLO}}, {"ns": "default"}, False, None),
    ("metadata.name label always present",
     {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prod-apps"}}}, {"ns": "prod-apps"}, True, None),
    ("unknown namespace fails closed", {}, {"ns": "nowhere"}, False, "namespace nowhere is not in"),
    ("selector matchLabels", {"selector": {"matchLabels": {"app": "web"}}}, {"labels": {"app": "web"}}, True, None),
    ("selector mismatch", {"selector": {"matchLabels": {"app": "web"}}}, {"labels": {"app": "db"}}, False, None),
    ("selector In", {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}},
     {"labels": {"tier": "b"}}, True, None),
    ("selector NotIn absent key", {"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}},
     {"labels": {}}, True, None),
    ("selector Exists", {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
     {"labels": {"x": "1"}}, False, None),
    ("selector DoesNotExist", {"selector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}},
     {"labels": {"x": "1"}}, True, None),
    ("unparsable selector fails closed",
     {"selector": {"matchExpressions": [{"key": "tier", "operator": "Equals", "values": ["a"]}]}},
     {"labels": {"tier": "a"}}, False, "ignored: selector.matchExpressions[0].operator"),
    ("In without values fails closed", {"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}},
     {"labels": {"tier": "a"}}, False, "ignored"),
    ("unparsable namespaceSelector fails closed", {"namespaceSelector": {"matchLabels": ["x"]}}, {}, False, "ignored"),
    ("probability 0 never", {"probability": 0}, {}, False, None),
    ("probability 0% never", {"probability": "0%"}, {}, False, None),
    ("probability 100% always", {"probability": "100%"}, {}, True, None),
    ("probability 150 is bad, not 100 %", {"probability": 150}, {}, False,
     "colocation profile p1 ignored: spec.probability: Invalid value: 150: must be between 0 and 100, inclusive"),
    ("probability 150% is bad", {"probability": "150%"}, {}, False, 'Invalid value: "150%": must be between 0 and 100'),
    ("probability without % is bad", {"probability": "50"}, {}, False,
     'spec.probability: Invalid value: "50": a valid percent string'),
    ("negative probability is bad", {"probability": -5}, {}, False, "Invalid value: -5: must be between 0 and 100"),
    ("a label the apiserver refuses is bad", {"annotations": {"my key": "v"}}, {}, False,
     'colocation profile p1 ignored: spec.annotations[my key]: Invalid value: "my key": name part must consist'),
    ("fractional probability is bad", {"probability": "50.5%"}, {}, False, "probability"),
    ("bad qosClass is bad", {"qosClass": "Gold"}, {}, False, "qosClass: Unsupported value"),
]


@pytest.mark.parametrize("name,spec,pod_kw,matched,warning", MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_profile_matching(name: str, spec: dict, pod_kw: dict, matched: bool, warning: str | None) -> None:
    state = make_state(profile("p1", **spec, labels={"matched": "yes"}))
    decision, out = mutate(pod(**pod_kw), state)
    assert decision.allowed
    assert (labels_of(out).get("matched") == "yes") is matched
    if warning:
        assert any(warning in w for w in decision.warnings), decision.warnings
    else:
        assert not any("ignored" in w or "not in the webhook" in w for w in decision.warnings)
    assert all(len(w) < 120 for w in decision.warnings)


def test_probability_uses_the_draw_exactly() -> None:
    state = make_state(profile("half", probability="50%", labels={"matched": "yes"}))
    below = _name_with_draw("default", 50, True)
    above = _name_with_draw("default", 50, False)
    assert labels_of(mutate(pod(name=below), state)[1]).get("matched") == "yes"
    assert "matched" not in labels_of(mutate(pod(name=above), state)[1])
    # the int form is the same percentage; 50 means draw < 50, not Koordinator's <= 50
    edge = next(f"e{i}" for i in range(5000) if probability_draw("default", f"e{i}") == 50)
    assert "matched" not in labels_of(mutate(pod(name=edge), make_state(profile("h", probability=50, labels={"matched": "y"})))[1])


def test_probability_share_is_exact_over_many_pods() -> None:
    draws = [probability_draw("ns", f"pod-{i}") for i in range(20000)]
    assert min(draws) == 0 and max(draws) == 99
    for percent in (1, 10, 50, 90):
        share = sum(d < percent for d in draws) / len(draws)
        assert abs(share - percent / 100) < 0.01, (percent, share)


def test_probability_draw_is_stable_for_generate_name_pods() -> None:
    """One admission of a pod gets one answer, however often the chain runs in it."""
    state = make_state(profile("half", probability="50%", labels={"matched": "yes"}))
    p = pod(name=None, generate_name="web-6c8dfc678-")
    results = {json.dumps(mutate(p, state)[1], sort_keys=True) for _ in range(3)}
    assert len(results) == 1


def test_probability_is_drawn_per_pod_not_per_generate_name() -> None:
    """The pods of one ReplicaSet share their generateName; each is drawn on its own (Koordinator draws per pod), so
    about half of them get a 50 % profile, not the whole ReplicaSet or none of it."""
    state = make_state(profile("half", probability="50%", labels={"matched": "yes"}))
    p = pod(name=None, generate_name="web-6c8dfc678-")
    outs = [mutate(p, state, uid=f"3f2a-{i}")[1] for i in range(200)]
    hits = sum(labels_of(o).get("matched") == "yes" for o in outs)
    assert 70 <= hits <= 130, hits
    for out in outs:  # each records its draw, which decided it
        draw = int(out["metadata"]["annotations"][DRAW_ANNOTATION])
        assert (labels_of(out).get("matched") == "yes") is (draw < 50)


def test_a_recorded_draw_holds_under_reinvocation() -> None:
    """A reinvocation brings another request uid: run on its own output, the chain changes nothing, whatever the
    uid, so a 50 % profile stays at 50 % in clusters where another webhook makes the apiserver call us again."""
    state = make_state(profile("half", probability="50%", labels={"matched": "yes"}))
    p = pod(name=None, generate_name="job-abc-")
    outcomes = set()
    for i in range(20):
        _, out = mutate(p, state, uid=f"first-{i}")
        assert out is not None and DRAW_ANNOTATION in out["metadata"]["annotations"]
        outcomes.add(labels_of(out).get("matched") == "yes")
        for j in range(5):
            again, _ = mutate(out, state, uid=f"again-{i}-{j}")
            assert again.allowed and again.patch in (None, []), (i, j, again.patch)
    assert outcomes == {True, False}  # a pod the draw left out stays out, one it took in stays in


DRAW_CASES = [
    # (name, pod, profile spec, expected recorded draw or None, expected denial fragment or None)
    ("a named pod draws from its name and records nothing", pod(name="web-0"), {"probability": "50%"}, None, None),
    ("no profile under 100 %: no draw", pod(name=None, generate_name="w-"), {}, None, None),
    ("a 50 % profile whose selector misses the pod: no record", pod(name=None, generate_name="w-"),
     {"probability": "50%", "selector": {"matchLabels": {"app": "other"}}}, None, None),
    ("a pinned draw is kept", pod(name=None, generate_name="w-", annotations={DRAW_ANNOTATION: "7"}),
     {"probability": "50%"}, "7", None),
    ("a pinned draw of 99 misses 50 %", pod(name=None, generate_name="w-", annotations={DRAW_ANNOTATION: "99"}),
     {"probability": "50%"}, "99", None),
    ("a recorded draw that is none is denied", pod(name=None, generate_name="w-", annotations={DRAW_ANNOTATION: "x"}),
     {"probability": "50%"}, None,
     f'metadata.annotations[{DRAW_ANNOTATION}]: Invalid value: "x": must be an integer from 0 to 99'),
    ("a recorded draw of 100 is denied", pod(name=None, generate_name="w-", annotations={DRAW_ANNOTATION: "100"}),
     {"probability": "50%"}, None, "must be an integer from 0 to 99"),
]


@pytest.mark.parametrize("name,obj,spec,recorded,denial", DRAW_CASES, ids=[c[0] for c in DRAW_CASES])
def test_draw_record(name: str, obj: dict, spec: dict, recorded: str | None, denial: str | None) -> None:
    decision, out = mutate(obj, make_state(profile("p", **spec, labels={"matched": "yes"})))
    if denial is not None:
        assert not decision.allowed and denial in (decision.message or ""), decision.message
        return
    assert out is not None
    assert (out["metadata"].get("annotations") or {}).get(DRAW_ANNOTATION) == recorded
    if recorded is not None:
        assert (labels_of(out).get("matched") == "yes") is (int(recorded) < 50)


AUDIT_CASES = [
    # (name, pod, profile spec, whether `audit` sees the profile apply)
    ("a 50 % profile counts for a template", pod(name=None, generate_name="web-"), {"probability": "50%"}, True),
    ("a 1 % profile too", pod(name=None, generate_name="web-"), {"probability": 1}, True),
    ("a 0 % profile never", pod(name=None, generate_name="web-"), {"probability": 0}, False),
    ("a pod's own draw does not count", pod(name=None, generate_name="w-", annotations={DRAW_ANNOTATION: "99"}),
     {"probability": "50%"}, True),
]


@pytest.mark.parametrize("name,obj,spec,applies", AUDIT_CASES, ids=[c[0] for c in AUDIT_CASES])
def test_audit_reads_a_template_as_every_pod_it_makes(name: str, obj: dict, spec: dict, applies: bool) -> None:
    """`audit` pins the draw (a template stands for all its pods, which draw each for itself): it names a workload
    a profile converts some pods of, and records no draw."""
    settings = chain.Settings(pinned_draw=0)
    decision = chain.mutate(request(copy.deepcopy(obj), uid="audit"), make_state(
        profile("p", **spec, labels={"matched": "yes"})), settings)
    assert decision.allowed
    out = jsonpatch.apply_patch(obj, decision.patch)
    assert (labels_of(out).get("matched") == "yes") is applies
    assert not any(DRAW_ANNOTATION in op["path"] for op in decision.patch or [])


# -- colocation profiles: what they set --------------------------------------------------------------
def test_profile_sets_every_field_in_koordinator_order() -> None:
    state = make_state(profile(
        "colo", labels={"team": "a", "koordinator.sh/qosClass": "LS"}, annotations={"note": "x"},
        labelKeysMapping={"app": "app-copy", "missing": "was-missing"},
        annotationKeysMapping={"note": "note-copy"},
        labelSuffixes={"app": "-be", "absent": "-x", "app-copy": "-copy"},
        schedulerName="koord-scheduler", qosClass="BE", priorityClassName="koord-batch", koordinatorPriority=1000))
    decision, out = mutate(pod(labels={"app": "web"}, requests={"cpu": "1"}), state)
    assert decision.allowed
    labels = labels_of(out)
    # app-copy is mapped from app before app gets its suffix; re-matching until the pod settles maps
    # the suffixed value (what a reinvocation would do), and "-copy" is appended once.
    assert labels == {"app": "web-be", "team": "a", "koordinator.sh/qosClass": "BE", "app-copy": "web-be-copy",
                      "was-missing": "", "koordinator.sh/priority": "1000"}
    assert out["metadata"]["annotations"]["note"] == "x"
    assert out["metadata"]["annotations"]["note-copy"] == "x"
    assert out["spec"]["schedulerName"] == "koord-scheduler"
    assert (out["spec"]["priorityClassName"], out["spec"]["priority"], out["spec"]["preemptionPolicy"]) == \
        ("koord-batch", 5000, "PreemptLowerPriority")
    assert decision.audit_annotations["colocation-profile"].startswith("applied colo:")
    assert "colocation profile colo applied: QoS BE, priorityClassName koord-batch" in decision.warnings


def test_later_profile_name_wins() -> None:
    state = make_state(profile("b-second", labels={"x": "b"}, qosClass="BE"),
                       profile("a-first", labels={"x": "a", "only-a": "1"}, qosClass="LS"))
    _, out = mutate(pod(), state)
    assert labels_of(out)["x"] == "b" and labels_of(out)["only-a"] == "1"
    assert labels_of(out)["koordinator.sh/qosClass"] == "BE"


def test_selector_sees_labels_as_received_then_settles() -> None:
    # b matches only once a has set tier=batch: the result is re-matched until it settles, so
    # the reinvoked webhook would apply b anyway; applying it now keeps the second pass empty.
    state = make_state(profile("a", labels={"tier": "batch"}),
                       profile("b", selector={"matchLabels": {"tier": "batch"}}, labels={"b": "yes"}))
    _decision, out = mutate(pod(), state)
    assert labels_of(out) == {"tier": "batch", "b": "yes"}
    assert chain.mutate(request(out), state, chain.Settings()).patch == []


def test_a_suffix_that_makes_this_pods_label_too_long_skips_the_profile_for_it() -> None:
    """The apiserver would refuse the pod (a label value over 63 bytes): that profile is not applied to it, with a
    warning naming the field, as for a patch that leaves an invalid pod; other pods still get it."""
    state = make_state(profile("p", labelSuffixes={"app": "-suffix"}, labels={"matched": "yes"}))
    long_value = "a" * 60
    explain: list[str] = []
    decision, out = mutate(pod(labels={"app": long_value}), state, explain)
    assert out is not None and labels_of(out) == {"app": long_value}
    why = f'spec.labelSuffixes[app]: Invalid value: "{long_value}-suffix": must be no more than 63 bytes'
    assert f"[colocation-profile] profile p not applied: {why}" in explain
    assert [w[:50] for w in decision.warnings] == [f"colocation profile p not applied: {why}"[:50]]
    assert labels_of(mutate(pod(labels={"app": "web"}), state)[1]) == {"app": "web-suffix", "matched": "yes"}


def test_label_suffix_is_not_appended_twice() -> None:
    state = make_state(profile("a", labelSuffixes={"app": "-a"}), profile("b", labelSuffixes={"app": "-b"}))
    _, out = mutate(pod(labels={"app": "web"}), state)
    assert labels_of(out)["app"] == "web-a-b"
    _, again = mutate(out, state)
    assert labels_of(again)["app"] == "web-a-b"


def test_unknown_priority_class_in_profile_is_denied() -> None:
    state = make_state(profile("colo", priorityClassName="koord-gold"))
    decision, _ = mutate(pod(name="web-1"), state)
    assert not decision.allowed and decision.code == 403 and decision.reason == "Forbidden"
    assert decision.message == 'pods "web-1" is forbidden: no PriorityClass with name koord-gold was found'
    assert decision.rule == "colocation-profile"


def test_profile_priority_class_without_preemption_policy_defaults() -> None:
    state = make_state(priority_class("never", 100, policy="Never"), priority_class("bare", 200, policy=None),
                       profile("a", selector={"matchLabels": {"c": "never"}}, priorityClassName="never"),
                       profile("b", selector={"matchLabels": {"c": "bare"}}, priorityClassName="bare"))
    assert mutate(pod(labels={"c": "never"}), state)[1]["spec"]["preemptionPolicy"] == "Never"
    out = mutate(pod(labels={"c": "bare"}, preemptionPolicy="Never"), state)[1]
    assert (out["spec"]["priority"], out["spec"]["preemptionPolicy"]) == (200, "PreemptLowerPriority")


def test_profile_patch_is_a_strategic_merge() -> None:
    patch = {"metadata": {"labels": {"from-patch": "1"}, "annotations": {"drop-me": None}},
             "spec": {"containers": [{"name": "app", "env": [{"name": "MODE", "value": "batch"}]},
                                     {"name": "sidecar", "image": "busybox"}],
                      "tolerations": [{"key": "batch", "operator": "Exists"}]}}
    state = make_state(profile("colo", labels={"x": "1"}, patch=patch))
    p = pod(annotations={"drop-me": "y", "keep": "z"})
    p["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    decision, out = mutate(p, state)
    assert decision.allowed
    assert labels_of(out) == {"x": "1", "from-patch": "1"}
    assert out["metadata"]["annotations"] == {"keep": "z"}
    app, sidecar = out["spec"]["containers"]
    assert app["image"] == "nginx" and app["env"] == [{"name": "A", "value": "1"}, {"name": "MODE", "value": "batch"}]
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    assert out["spec"]["tolerations"] == [{"key": "batch", "operator": "Exists"}]
    assert chain.mutate(request(out), state, chain.Settings()).patch == []


def test_profile_patch_may_not_rename_the_pod() -> None:
    state = make_state(profile("colo", patch={"metadata": {"name": "other"}}, labels={"x": "1"}))
    decision, out = mutate(pod(), state)
    assert out["metadata"]["name"] == "p" and "x" not in labels_of(out)
    assert any("may not change the pod's name" in w for w in decision.warnings)


@pytest.mark.parametrize(("patch", "why"), [
    ({"metadata": None}, "may not change the pod's name"),
    ({"metadata": {"$patch": "replace", "labels": {"a": "b"}}}, "may not change the pod's name"),
    ({"metadata": {"labels": "x"}}, "the pod it gives is not valid: metadata.labels: Invalid value"),
    ({"spec": "x"}, "the pod it gives is not valid: spec: Required value: a pod needs a spec"),
    ({"spec": None}, "the pod it gives is not valid: spec: Required value: a pod needs a spec"),
    ({"spec": {"containers": "x"}}, "the pod it gives is not valid: spec.containers: Invalid value"),
])
def test_a_profile_patch_that_gives_no_valid_pod_is_skipped_with_a_warning(patch: dict, why: str) -> None:
    state = make_state(profile("colo", patch=patch, labels={"x": "1"}))
    decision, out = mutate(pod(), state)
    assert decision.allowed and not decision.rule_failed and "x" not in labels_of(out)
    assert out["metadata"]["name"] == "p" and isinstance(out["spec"]["containers"], list)
    assert any(w.startswith("colocation profile colo not applied: patch: ") and why in w
               for w in decision.warnings), decision.warnings


def test_profile_patch_without_merge_key_is_skipped_with_a_warning() -> None:
    state = make_state(profile("colo", patch={"spec": {"containers": [{"image": "x"}]}}, labels={"x": "1"}))
    decision, out = mutate(pod(), state)
    assert decision.allowed and "x" not in labels_of(out)
    assert any("does not contain declared merge key: name" in w for w in decision.warnings)


def test_profiles_that_undo_each_other_are_reported() -> None:
    state = make_state(profile("a", selector={"matchLabels": {"x": "1"}}, labels={"x": "2"}),
                       profile("b", selector={"matchLabels": {"x": "2"}}, labels={"x": "1"}))
    decision, _ = mutate(pod(labels={"x": "1"}), state)
    assert decision.allowed
    assert any("did not settle" in w for w in decision.warnings)


# -- priority -------------------------------------------------------------------------------------------
PRIORITY_CASES = [
    # (name, extra objects, pod spec fields, expected (class, priority, policy) or denial message)
    ("class resolves", [], {"priorityClassName": "koord-prod", "priority": None, "preemptionPolicy": None},
     ("koord-prod", 9000, "PreemptLowerPriority")),
    ("system-node-critical is built in", [], {"priorityClassName": "system-node-critical", "priority": None,
                                              "preemptionPolicy": None},
     ("system-node-critical", 2000001000, "PreemptLowerPriority")),
    ("no class and no default: 0", [], {"priority": None, "preemptionPolicy": None}, (None, 0, "PreemptLowerPriority")),
    ("default class name is written", [priority_class("d-high", 100, True), priority_class("d-low", 50, True, "Never")],
     {"priority": None, "preemptionPolicy": None}, ("d-low", 50, "Never")),
    ("class without preemptionPolicy", [priority_class("bare", 7, policy=None)],
     {"priorityClassName": "bare", "priority": None, "preemptionPolicy": None}, ("bare", 7, "PreemptLowerPriority")),
    ("matching given priority accepted", [], {"priorityClassName": "koord-batch", "priority": 5000},
     ("koord-batch", 5000, "PreemptLowerPriority")),
    ("unknown class", [], {"priorityClassName": "nope", "priority": None},
     'pods "p" is forbidden: no PriorityClass with name nope was found'),
    ("given priority differs", [], {"priorityClassName": "koord-prod", "priority": 0},
     'pods "p" is forbidden: the integer value of priority (0) must not be provided in pod spec; '
     "priority admission controller computed 9000 from the given PriorityClass name"),
    ("given policy differs", [], {"priorityClassName": "koord-prod", "priority": 9000, "preemptionPolicy": "Never"},
     'pods "p" is forbidden: the string value of PreemptionPolicy (Never) must not be provided in pod spec; '
     "priority admission controller computed PreemptLowerPriority from the given PriorityClass name"),
]


@pytest.mark.parametrize("name,objects,fields,expected", PRIORITY_CASES, ids=[c[0] for c in PRIORITY_CASES])
def test_priority(name: str, objects: list, fields: dict, expected: object) -> None:
    p = pod()
    for k, v in fields.items():
        if v is None:
            p["spec"].pop(k, None)
        else:
            p["spec"][k] = v
    decision, out = mutate(p, make_state(*objects))
    if isinstance(expected, str):
        assert not decision.allowed and decision.code == 403 and decision.message == expected
        return
    assert decision.allowed, decision.message
    cls, prio, policy = expected  # type: ignore[misc]
    assert (out["spec"].get("priorityClassName"), out["spec"]["priority"], out["spec"]["preemptionPolicy"]) == \
        (cls, prio, policy)


def test_generate_name_is_used_in_forbidden_prefix() -> None:
    p = pod(name=None, generate_name="web-", priorityClassName="nope")
    decision, _ = mutate(p, make_state())
    assert decision.message == 'pods "web-" is forbidden: no PriorityClass with name nope was found'


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
def test_batch_resources(name: str, prio: int, requests: dict | None, limits: dict | None,
                         want_req: dict, want_lim: dict | None) -> None:
    state = make_state(priority_class("custom", prio))
    decision, out = mutate(pod(requests=requests, limits=limits, priorityClassName="custom", priority=prio), state)
    assert decision.allowed, decision.message
    res = resources_of(out)
    assert res.get("requests") == want_req
    assert res.get("limits") == want_lim


def test_batch_covers_init_containers_not_overhead_and_writes_the_annotation() -> None:
    p = pod(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"},
            priorityClassName="koord-batch", priority=5000, overhead={"cpu": "100m", "memory": "10Mi"})
    p["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "50m"}}}]
    decision, out = mutate(p, make_state())
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
    _decision, out = mutate(pod(requests={"cpu": "1"}), state)
    assert out["spec"]["priority"] == 5000 and resources_of(out) == {"requests": {"cpu": "1"}}


def test_batch_conversion_without_a_profile_and_existing_annotation_kept() -> None:
    p = pod(requests={"kubernetes.io/batch-cpu": "1k"}, priorityClassName="koord-batch", priority=5000,
            annotations={ESPEC: '{"containers":{"app":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}}'})
    decision, _out = mutate(p, make_state())
    assert decision.patch == []


def test_legacy_ack_qos_annotation_counts_as_be() -> None:
    p = pod(annotations={"alibabacloud.com/qosClass": "BE"}, requests={"cpu": "1"})
    decision, out = mutate(p, make_state())
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
def test_invalid_quantity_is_denied_and_nothing_converted(name: str, prio: int, requests: dict, limits: dict | None,
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
def admit_both(p: dict, state=None) -> tuple:  # type: ignore[no-untyped-def]
    """The mutating chain, then the validating chain on its output, as the apiserver runs them:
    (mutating decision, output pod, validating decision, every warning the user sees)."""
    from tests.validating_helpers import request as vrequest

    state = state or make_state()
    decision, out = mutate(p, state)
    assert decision.allowed, decision.message
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
def test_converted_batch_pod_without_qos_gets_be(name: str, kwargs: dict, label: str | None, valid: bool) -> None:
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
    _decision, out = mutate(pod(requests={"cpu": "1"}), skip)
    assert "koordinator.sh/qosClass" not in labels_of(out)  # not converted: cpu is allowed without BE


@pytest.mark.parametrize("operator,seen,copied", [("Exists", True, "BE"), ("In", True, "BE"),
                                                  ("DoesNotExist", True, "")])
def test_profiles_reading_the_qos_label_see_the_be_label_in_the_same_request(operator: str, seen: bool,
                                                                             copied: str) -> None:
    # The label is set after the profiles ran: the chain runs once more, so that a reinvocation on its
    # answer (reinvocationPolicy IfNeeded) does not apply these profiles then.
    expr = {"key": "koordinator.sh/qosClass", "operator": operator}
    if operator == "In":
        expr["values"] = ["BE"]
    state = make_state(profile("reads-qos", selector={"matchExpressions": [expr]}, labels={"seen": "yes"},
                               labelKeysMapping={"koordinator.sh/qosClass": "copied-qos"}))
    p = pod(requests={"cpu": "1"}, priorityClassName="koord-batch", priority=5000)
    _decision, out = mutate(p, state)
    assert labels_of(out)["koordinator.sh/qosClass"] == "BE"
    assert (labels_of(out).get("seen") == "yes") is seen
    assert labels_of(out).get("copied-qos") == copied
    assert chain.mutate(request(out), state, chain.Settings()).patch == []


@pytest.mark.parametrize("profiles,passes", [
    ([], 1), ([profile("reads-app", selector={"matchLabels": {"app": "x"}})], 1),
    ([profile("suffixes-qos", labelSuffixes={"koordinator.sh/qosClass": "-x"})], 2),
    ([profile("selects-qos", selector={"matchExpressions": [
        {"key": "koordinator.sh/qosClass", "operator": "DoesNotExist"}]}, labels={"x": "y"})], 2)])
def test_the_chain_runs_again_only_when_a_profile_reads_the_qos_label(profiles: list, passes: int) -> None:
    explain: list[str] = []
    _decision, out = mutate(pod(requests={"cpu": "1"}, priorityClassName="koord-batch", priority=5000),
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
        name: str, prio: int, requests: dict, limits: dict | None, overhead: dict | None, want: dict,
        warning: str | None, denial: str | None) -> None:
    state = make_state(priority_class("custom", prio))
    extra = {"overhead": overhead} if overhead else {}
    p = pod(requests=requests, limits=limits, priorityClassName="custom", priority=prio,
            labels={"koordinator.sh/qosClass": "BE" if prio == 5000 else "LS"}, **extra)
    decision, out = mutate(p, state)
    assert decision.allowed
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


# -- recorded reviews ------------------------------------------------------------------------------------
def _recorded(name: str):  # type: ignore[no-untyped-def]
    return review_from_dict(load_fixture(f"admission/{name}")).request


def _example_state(*extra: dict):  # type: ignore[no-untyped-def]
    return make_state(namespace("webhook-test"), profile(
        "colocation-profile-example", namespaceSelector={"matchLabels": COLO}, selector={"matchLabels": COLO},
        qosClass="BE", priorityClassName="koord-batch", koordinatorPriority=1000, schedulerName="koord-scheduler",
        labels={"koordinator.sh/mutated": "true"}), *extra)


def test_recorded_koord_batch_init_containers() -> None:
    import jsonpatch

    req = _recorded("v1-mutate-create-koord-batch-init-containers.json")
    decision = chain.mutate(req, _example_state(), chain.Settings())
    assert decision.allowed
    out = jsonpatch.apply_patch(req.object, decision.patch)
    worker = out["spec"]["containers"][0]["resources"]
    assert worker == {"limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1073741824"},
                      "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "536870912"}}
    init, sidecar = (c["resources"] for c in out["spec"]["initContainers"])
    assert init["requests"] == {"kubernetes.io/batch-cpu": "50", "kubernetes.io/batch-memory": "33554432"}
    assert sidecar["limits"] == {"kubernetes.io/batch-cpu": "50", "kubernetes.io/batch-memory": "33554432"}
    assert "koordinator.sh/mutated" not in out["metadata"]["labels"]  # the profile's selector does not match
    assert json.loads(out["metadata"]["annotations"][ESPEC])["containers"]["worker"]["limits"] == \
        {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "1073741824"}
    again = chain.mutate(replace(req, object=out), _example_state(), chain.Settings())
    assert again.patch == []


def test_recorded_deployment_pod_with_generate_name() -> None:
    import jsonpatch

    req = _recorded("v1-mutate-create-deployment-pod.json")
    assert not req.name and "name" not in req.object["metadata"]
    decision = chain.mutate(req, _example_state(), chain.Settings())
    out = jsonpatch.apply_patch(req.object, decision.patch)
    assert out["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert out["metadata"]["labels"]["koordinator.sh/priority"] == "1000"
    assert (out["spec"]["priorityClassName"], out["spec"]["priority"]) == ("koord-batch", 5000)
    assert out["spec"]["schedulerName"] == "koord-scheduler"
    assert out["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "134217728"}
    assert resolve_priority(out["spec"], _example_state().priority_class, None).error is None


def test_recorded_update_is_allowed_unchanged() -> None:
    decision = chain.mutate(_recorded("v1-mutate-update-label.json"), _example_state(), chain.Settings())
    assert decision.allowed and decision.patch == []


def _reaction(case: str) -> dict:
    return next(c for c in load_fixture("admission/apiserver-reactions.json") if c["case"] == case)


def test_reinvoked_priority_plugin_rejects_a_class_only_patch_as_recorded() -> None:
    import jsonpatch

    case = _reaction("patch-priorityclassname-only")
    obj = case["admission_review_request"]["request"]["object"]
    patched = jsonpatch.apply_patch(obj, case["webhook_response_patch_decoded"])
    res = resolve_priority(patched["spec"], make_state().priority_class, None)
    assert res.error is not None
    assert f'pods "{obj["metadata"]["name"]}" is forbidden: {res.error}' in case["kubectl_stderr"]


def test_profile_class_change_passes_the_reinvoked_priority_plugin() -> None:
    import jsonpatch

    case = _reaction("patch-priorityclassname-priority-preemptionpolicy")
    obj = case["admission_review_request"]["request"]["object"]
    assert obj["spec"]["priority"] == 9000
    state = _example_state(profile("to-batch", namespaceSelector={"matchLabels": {
        "kubernetes.io/metadata.name": "webhook-test"}}, priorityClassName="koord-batch"))
    decision = chain.mutate(review_from_dict(case["admission_review_request"]).request, state, chain.Settings())
    out = jsonpatch.apply_patch(obj, decision.patch)
    accepted = jsonpatch.apply_patch(obj, case["webhook_response_patch_decoded"])  # what the apiserver took
    for f in ("priorityClassName", "priority", "preemptionPolicy"):
        assert out["spec"][f] == accepted["spec"][f]
    assert resolve_priority(out["spec"], state.priority_class, None).error is None
    stored = case["stored_object_or_null"]["spec"]
    assert (stored["priorityClassName"], stored["priority"]) == (out["spec"]["priorityClassName"], out["spec"]["priority"])


def test_patch_ops_keep_their_own_copy_of_values() -> None:
    from webhook.admission.domain.patch import PatchBuilder

    doc: dict = {"spec": {}}
    pb = PatchBuilder(doc)
    container = {"name": "a", "resources": {"requests": {"cpu": "1"}}}
    pb.set(("spec", "containers"), [container])
    pb.remove(("spec", "containers", 0, "resources", "requests", "cpu"))
    assert pb.ops[0]["value"] == [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]
    assert pb.set(("metadata", "labels", "a"), "1") and pb.ops[-1] == {
        "op": "add", "path": "/metadata", "value": {"labels": {"a": "1"}}}
    assert not pb.set(("metadata", "labels", "a"), "1")
