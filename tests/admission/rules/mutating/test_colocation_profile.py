"""Table tests of the colocation-profile rule (webhook/admission/rules/mutating/colocation_profile.py): which profiles
match a pod and what they set."""

from __future__ import annotations

import copy
import json
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
)
from webhook.admission import chain
from webhook.admission.domain.colocation_profile import DRAW_ANNOTATION, probability_draw

COLO = {"koordinator.sh/enable-colocation": "true"}


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
def test_profile_matching(name: str, spec: dict[str, Any], pod_kw: dict[str, Any], matched: bool, warning: str | None) -> None:
    state = make_state(profile("p1", **spec, labels={"matched": "yes"}))
    decision, out = mutate(pod(**pod_kw), state)
    assert decision.allowed
    assert out is not None
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
    assert labels_of(mutated(pod(name=below), state)).get("matched") == "yes"
    assert "matched" not in labels_of(mutated(pod(name=above), state))
    # the int form is the same percentage; 50 means draw < 50, not Koordinator's <= 50
    edge = next(f"e{i}" for i in range(5000) if probability_draw("default", f"e{i}") == 50)
    assert "matched" not in labels_of(mutated(pod(name=edge), make_state(profile("h", probability=50, labels={"matched": "y"}))))


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
    outs = [mutated(p, state, uid=f"3f2a-{i}") for i in range(200)]
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
        out = mutated(p, state, uid=f"first-{i}")
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
def test_draw_record(name: str, obj: dict[str, Any], spec: dict[str, Any], recorded: str | None, denial: str | None) -> None:
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
def test_audit_reads_a_template_as_every_pod_it_makes(name: str, obj: dict[str, Any], spec: dict[str, Any], applies: bool) -> None:
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
    assert out is not None
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
    out = mutated(pod(), state)
    assert labels_of(out)["x"] == "b" and labels_of(out)["only-a"] == "1"
    assert labels_of(out)["koordinator.sh/qosClass"] == "BE"


def test_selector_sees_labels_as_received_then_settles() -> None:
    # b matches only once a has set tier=batch: the result is re-matched until it settles, so
    # the reinvoked webhook would apply b anyway; applying it now keeps the second pass empty.
    state = make_state(profile("a", labels={"tier": "batch"}),
                       profile("b", selector={"matchLabels": {"tier": "batch"}}, labels={"b": "yes"}))
    out = mutated(pod(), state)
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
    assert labels_of(mutated(pod(labels={"app": "web"}), state)) == {"app": "web-suffix", "matched": "yes"}


def test_label_suffix_is_not_appended_twice() -> None:
    state = make_state(profile("a", labelSuffixes={"app": "-a"}), profile("b", labelSuffixes={"app": "-b"}))
    out = mutated(pod(labels={"app": "web"}), state)
    assert labels_of(out)["app"] == "web-a-b"
    again = mutated(out, state)
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
    assert mutated(pod(labels={"c": "never"}), state)["spec"]["preemptionPolicy"] == "Never"
    out = mutated(pod(labels={"c": "bare"}, preemptionPolicy="Never"), state)
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
    assert out is not None
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
    assert out is not None
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
def test_a_profile_patch_that_gives_no_valid_pod_is_skipped_with_a_warning(patch: dict[str, Any], why: str) -> None:
    state = make_state(profile("colo", patch=patch, labels={"x": "1"}))
    decision, out = mutate(pod(), state)
    assert out is not None
    assert decision.allowed and not decision.rule_failed and "x" not in labels_of(out)
    assert out["metadata"]["name"] == "p" and isinstance(out["spec"]["containers"], list)
    assert any(w.startswith("colocation profile colo not applied: patch: ") and why in w
               for w in decision.warnings), decision.warnings


def test_profile_patch_without_merge_key_is_skipped_with_a_warning() -> None:
    state = make_state(profile("colo", patch={"spec": {"containers": [{"image": "x"}]}}, labels={"x": "1"}))
    decision, out = mutate(pod(), state)
    assert out is not None
    assert decision.allowed and "x" not in labels_of(out)
    assert any("does not contain declared merge key: name" in w for w in decision.warnings)


def test_profiles_that_undo_each_other_are_reported() -> None:
    state = make_state(profile("a", selector={"matchLabels": {"x": "1"}}, labels={"x": "2"}),
                       profile("b", selector={"matchLabels": {"x": "2"}}, labels={"x": "1"}))
    decision, _ = mutate(pod(labels={"x": "1"}), state)
    assert decision.allowed
    assert any("did not settle" in w for w in decision.warnings)
