"""webhook/policies/mutating.py offline: what it renders, for which profiles, deterministically, and that every
expression compiles as a 1.36 apiserver compiles it (tests/cel_check.py). That the policies convert as the webhook
does is proven on a real apiserver: tests/e2e/test_real_apiserver_mutating.py."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import mutating as m
from tests.cel_check import check_policies
from webhook.cli import webhook as webhook_cli
from webhook.cluster.profiles import compile_profile
from webhook.cluster.state import ClusterState
from webhook.policies import mutating

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests" / "components" / "mutating-policies"
EXAMPLE = yaml.safe_load((ROOT / "manifests" / "examples" / "colocation-profile.yaml").read_text())
SKIP = {"config.koordinator.sh/skip-update-resources": "true"}
# Disjoint from the example's selector (koordinator.sh/enable-colocation=true).
NOT_EXAMPLE = {"key": "koordinator.sh/enable-colocation", "operator": "DoesNotExist"}


def _rendered(state: ClusterState) -> mutating.MutatingRendered:
    return mutating.render_mutating(state.colocation_profiles(), state.priority_class)


def _names(objects: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objects if o["kind"] == "MutatingAdmissionPolicy"]


# Profiles that use every field a policy applies: they may all have one (disjoint selectors).
MANY = [
    EXAMPLE,
    m.profile("mid", selector={"matchLabels": {"app": "etl"}, "matchExpressions": [NOT_EXAMPLE]},
              priorityClassName="koord-mid", annotations={"team.example.com/tier": "mid"},
              labelKeysMapping={"team": "example.com/team"},
              annotationKeysMapping={"owner": "example.com/owner"}, labelSuffixes={"track": "-mid"},
              koordinatorPriority=7100, schedulerName="koord-scheduler"),
    m.profile("skip", SKIP, selector={"matchLabels": {"app": "spark"}, "matchExpressions": [NOT_EXAMPLE]},
              priorityClassName="koord-batch", qosClass="BE"),
    m.profile("labels-only", selector={"matchLabels": {"app": "web"}, "matchExpressions": [NOT_EXAMPLE]},
              labels={"example.com/tier": "web"}),
]


def test_the_committed_component_is_what_the_generator_renders() -> None:
    path = COMPONENT / "mutating-policies.yaml"
    assert path.read_text() == mutating.render_static(), f"run: python -m webhook.policies.mutating > {path}"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("MutatingAdmissionPolicy", mutating.BAND_NAME), ("MutatingAdmissionPolicyBinding", mutating.BAND_NAME),
        ("MutatingAdmissionPolicy", mutating.SPEC_NAME), ("MutatingAdmissionPolicyBinding", mutating.SPEC_NAME)]
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["mutating-policies.yaml"]


def test_every_expression_compiles_as_a_1_36_apiserver_compiles_it() -> None:
    rendered = _rendered(m.make_state(*MANY))
    assert _names(rendered.objects) == [*(mutating.PREFIX + n for n in ("colocation-profile-example", "labels-only",
                                                                         "mid", "skip")),
                                        mutating.BAND_NAME, mutating.SPEC_NAME], rendered.notes
    static = [d for d in yaml.safe_load_all(mutating.render_static()) if d]
    assert check_policies([*rendered.objects, *static]) == []


def test_the_checker_would_see_a_broken_expression() -> None:
    """The check above can fail: the same policies with one mutation made to return the wrong type."""
    policy = copy.deepcopy(mutating.band_mutation([])[0])
    policy["spec"]["mutations"][0]["jsonPatch"]["expression"] = "variables.conversion"
    assert check_policies([policy]) == [
        f"MutatingAdmissionPolicy {mutating.BAND_NAME}: spec.mutations[0].jsonPatch.expression: must evaluate to "
        "list(JSONPatch) but got list(list(string))"]


def test_the_output_is_deterministic() -> None:
    first = _rendered(m.make_state(*MANY)).objects
    for seed in range(3):
        shuffled = copy.deepcopy(MANY)
        random.Random(seed).shuffle(shuffled)
        assert _rendered(m.make_state(*shuffled)).objects == first
    assert json.dumps(first, sort_keys=True) == json.dumps(_rendered(m.make_state(*MANY)).objects, sort_keys=True)


@pytest.mark.parametrize(("profiles", "note"), [
    ([m.profile("half", probability=50, qosClass="BE", priorityClassName="koord-batch")],
     "half: no mutating policy: probability 50%"),
    ([m.profile("patched", qosClass="BE", patch={"spec": {"terminationGracePeriodSeconds": 5}})],
     "patched: no mutating policy: it has a patch"),
    ([m.profile("nowhere", priorityClassName="no-such-class")],
     "nowhere: no mutating policy: PriorityClass no-such-class is not in the cluster state"),
    ([m.profile("bad", qosClass="XX")], "bad: no mutating policy: the profile is invalid"),
    ([m.profile("a", selector={"matchLabels": {"app": "x"}}, priorityClassName="koord-batch"),
      m.profile("b", selector={"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                priorityClassName="koord-mid")],
     "a: no mutating policy: it may match the pods b matches, and both write spec/priorityClassName, differently"),
    ([m.profile("a", selector={"matchLabels": {"app": "x"}}, qosClass="BE"),
      m.profile("b", selector={"matchLabels": {"app": "x"}}, labelSuffixes={"app": "-b"})],
     "a: no mutating policy: it may match the pods b matches, and a key mapping or a suffix"),
    ([m.profile("a", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch"),
      m.profile("b", SKIP, selector={"matchLabels": {"app": "x"}}, qosClass="BE")],
     "a: no mutating policy: it may match the pods b matches, and one skips the conversion, the other does not"),
    ([m.profile("a", selector={"matchLabels": {"app": "x"}}, labels={"tier": "batch"}),
      m.profile("b", selector={"matchLabels": {"tier": "batch"}}, qosClass="BE")],
     "a: no mutating policy: it writes label tier, which b selects on"),
], ids=["probability", "patch", "missing class", "invalid", "overlap, two classes", "overlap, suffix",
        "overlap, skip", "label read by another"])
def test_a_profile_no_policy_can_apply_gets_none_and_a_note(profiles: list[dict[str, Any]], note: str) -> None:
    rendered = _rendered(m.make_state(*profiles))
    assert [n for n in rendered.notes if n.startswith(note)], rendered.notes
    name = note.split(":", 1)[0]
    assert mutating.PREFIX + name not in _names(rendered.objects)


def test_profiles_whose_selectors_cannot_meet_each_get_one() -> None:
    a = m.profile("a", selector={"matchLabels": {"app": "x"}}, priorityClassName="koord-batch")
    b = m.profile("b", selector={"matchLabels": {"app": "y"}}, priorityClassName="koord-mid")
    c = m.profile("c", selector={"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x", "y"]}]},
                  priorityClassName="koord-prod")
    d = m.profile("d", namespaceSelector={"matchLabels": {"team": "prod"}},
                  selector={"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, qosClass="LS")
    rendered = _rendered(m.make_state(a, b, c, d))
    assert rendered.notes == []
    assert _names(rendered.objects)[:4] == [mutating.PREFIX + n for n in "abcd"]


def test_the_band_policy_leaves_the_pods_of_class_setting_and_skipping_profiles_to_them() -> None:
    rendered = _rendered(m.make_state(*MANY))
    band = next(o for o in rendered.objects if o["metadata"]["name"] == mutating.BAND_NAME)
    assert band["metadata"]["annotations"][mutating.PROFILE_ANNOTATION] == "colocation-profile-example,mid,skip"
    left = band["spec"]["variables"][0]
    assert left["name"] == "left" and "namespaceObject.metadata.labels" in left["expression"]
    assert band["spec"]["mutations"][0]["jsonPatch"]["expression"].startswith("variables.left ? [] : ")
    # The skipping profile's own policy sets its class and QoS class and converts nothing.
    skip = next(o for o in rendered.objects if o["metadata"]["name"] == mutating.PREFIX + "skip")
    assert "variables" not in skip["spec"]
    assert "conversion" not in skip["spec"]["mutations"][0]["jsonPatch"]["expression"]


def test_a_profile_policy_is_bound_by_the_profile_selectors_outside_the_excluded_namespaces() -> None:
    rendered = _rendered(m.make_state(EXAMPLE))
    binding = next(o for o in rendered.objects if o["kind"] == "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}, "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "koordinator-system", "colocation-system"]}]},
        "objectSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}}}
    policy = next(o for o in rendered.objects if o["kind"] == "MutatingAdmissionPolicy")
    assert policy["spec"]["reinvocationPolicy"] == "IfNeeded" and policy["spec"]["failurePolicy"] == "Fail"


# -- the command ---------------------------------------------------------------------------------------------------
def _state_dir(tmp_path: Path, *objects: dict[str, Any]) -> Path:
    d = tmp_path / "state"
    d.mkdir(exist_ok=True)
    (d / "state.yaml").write_text(yaml.safe_dump_all([*m.KOORD_CLASSES, *m.NAMESPACES, *objects], sort_keys=False))
    return d


def test_the_policies_command_renders_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert webhook_cli.main(["policies", "--mutating"]) == 0
    assert capsys.readouterr().out == mutating.render_static()
    state_dir = _state_dir(tmp_path, EXAMPLE, m.profile("half", probability=50, qosClass="BE"))
    assert webhook_cli.main(["policies", "--mutating", "--cluster-state", str(state_dir), "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["items"] == _rendered(m.make_state(EXAMPLE, m.profile("half", probability=50,
                                                                                 qosClass="BE"))).objects
    assert "note: half: no mutating policy: probability 50%" in err


def test_a_profile_field_the_crd_does_not_know_is_caught_when_rendering(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The policies bake the profiles in (no paramKind, whose typos the apiserver takes at write time): a profile
    is read through the cluster state, which checks it against the CRD's schema: a folder's typo stops the command
    naming the field, a live cluster's marks the profile invalid (it then gets no policy, with a note)."""
    typo = m.profile("typo", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClasName="koord-batch")
    assert webhook_cli.main(["policies", "--mutating", "--cluster-state", str(_state_dir(tmp_path, typo))]) == 2
    assert 'ClusterColocationProfile typo: unknown field "spec.priorityClasName"' in capsys.readouterr().err
    marked = compile_profile(typo)
    marked.error = 'unknown field "spec.priorityClasName"'   # as the live source's state holds it
    rendered = mutating.render_mutating([marked], m.make_state().priority_class)
    assert rendered.notes == ["typo: no mutating policy: the profile is invalid and never applies: unknown field "
                              '"spec.priorityClasName"']
    assert _names(rendered.objects) == [mutating.BAND_NAME, mutating.SPEC_NAME]


def test_check_finds_them_up_to_date_or_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = _state_dir(tmp_path, EXAMPLE)
    applied = _rendered(m.make_state(EXAMPLE)).objects
    path = tmp_path / "applied.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": applied}))
    assert webhook_cli.main(["policies", "--mutating", "--cluster-state", str(state_dir), "--check", str(path)]) == 0
    assert capsys.readouterr().out == ("the applied policies are up to date (the band conversion, the "
                                       "extended-resource-spec annotation and 1 profile(s))\n")
    edited = copy.deepcopy(applied)
    edited[0]["spec"]["reinvocationPolicy"] = "Never"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": edited}))
    assert webhook_cli.main(["policies", "--mutating", "--cluster-state", str(state_dir), "--check", str(path)]) == 1
    assert "spec.reinvocationPolicy: differs" in capsys.readouterr().out



def test_every_converting_policy_writes_the_resource_spec_annotation_last() -> None:
    """The apiserver calls mutating policies in no set order (it ranges over a map of them) and calls one again
    after another policy's patch only if it was called before (``ShouldReinvoke`` in
    staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/dispatcher.go): on a 1.36.2 apiserver a band
    pod converted after the annotation policy had been left out by its matchConditions kept no annotation. So each
    policy that converts writes the annotation in a mutation of its own after the conversion, and the annotation
    policy itself stays narrow: a pod it matches pays a second pass of the apiserver's plugins."""
    celpy = pytest.importorskip("celpy", reason="cel-python is a test extra: pip install -e '.[test]'")
    _, spec_patch, _ = mutating._resource_spec()
    state = m.make_state(*MANY)
    policies = [o for o in _rendered(state).objects if o["kind"] == "MutatingAdmissionPolicy"]
    converting = {p["metadata"]["name"]: p for p in policies
                  if any("variables.conversion" in x["jsonPatch"]["expression"] for x in p["spec"]["mutations"])}
    assert set(converting) == {mutating.BAND_NAME, mutating.PREFIX + EXAMPLE["metadata"]["name"],
                               mutating.PREFIX + "mid"}, sorted(converting)
    for name, policy in converting.items():
        mutations = [x["jsonPatch"]["expression"] for x in policy["spec"]["mutations"]]
        assert len(mutations) == 2 and mutations[-1] == spec_patch, name
        assert "variables.conversion" in mutations[0], name

    (spec,) = [p for p in policies if p["metadata"]["name"] == mutating.SPEC_NAME]
    env = celpy.Environment()
    conditions = [env.program(env.compile(c["expression"])) for c in spec["spec"]["matchConditions"]]

    def called(resources: dict[str, Any]) -> bool:
        pod = {"spec": {"containers": [{"name": "app", "resources": resources}]}}
        return all(bool(c.evaluate({"object": celpy.json_to_cel(pod)})) for c in conditions)

    assert called({"requests": {"kubernetes.io/batch-cpu": "500"}})
    assert called({"limits": {"kubernetes.io/batch-memory": "1Gi"}})
    assert not called({"requests": {"cpu": "500m", "memory": "1Gi"}})
