"""Per-profile ValidatingAdmissionPolicies (``webhook.policies.profiles``): while the webhook is down, a
pod a ClusterColocationProfile matches is refused unless it carries what the profile sets; every other pod is not
their business.

Each profile of the table is rendered, and its policy and binding evaluated as the apiserver does
(``tests/admission_policy.py``) on: the pod the real mutating chain made of it (admitted), the same pod unconverted
(refused, with the message), a pod the profile does not match (admitted), a pod the user wrote compliant (admitted).
Then the command (``colocation-webhook policies --cluster-state``), the schema, and ``--check``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import mutating as m
from webhook.cli import webhook as webhook_cli
from webhook.cluster.state import ClusterState
from webhook.policies import invariants as policies
from webhook.policies import profiles as profile_policies

pytest.importorskip("celpy", reason="cel-python is a test extra: pip install -e '.[test]'")
from tests.admission_policy import Policy  # after the skip: it needs celpy

QOS = "koordinator.sh/qosClass"
SKIP = {"config.koordinator.sh/skip-update-resources": "true"}
ENABLED = {"koordinator.sh/enable-colocation": "true"}
EXAMPLE = m.profile("colocation-profile-example", namespaceSelector={"matchLabels": ENABLED},
                    selector={"matchLabels": ENABLED}, qosClass="BE", priorityClassName="koord-batch",
                    koordinatorPriority=1000, schedulerName="koord-scheduler", labels={"koordinator.sh/mutated": "true"})
CPU = {"cpu": "500m", "memory": "256Mi"}
BATCH = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}

# name, profile, the pod it matches (labels, namespace), one it does not, the pod the user writes compliant
CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("example", EXAMPLE,
     m.pod(ns="colo-demo", labels=dict(ENABLED), requests=CPU, limits=CPU),
     m.pod(ns="colo-demo", labels={}, requests=CPU, limits=CPU),
     m.pod(ns="colo-demo", labels={**ENABLED, QOS: "BE"}, requests=BATCH, limits=BATCH,
           priorityClassName="koord-batch", priority=5000)),
    ("namespace selector only",
     m.profile("ns-only", namespaceSelector={"matchLabels": {"team": "prod"}}, qosClass="BE",
               priorityClassName="koord-batch"),
     m.pod(ns="prod-apps", labels={}, requests=CPU, limits=CPU),
     m.pod(ns="default", labels={}, requests=CPU, limits=CPU),
     m.pod(ns="prod-apps", labels={QOS: "BE"}, priorityClassName="koord-batch", priority=5000)),
    ("object selector",
     m.profile("by-label", selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch"]}]},
               qosClass="BE", priorityClassName="koord-batch"),
     m.pod(labels={"tier": "batch"}, requests=CPU),
     m.pod(labels={"tier": "web"}, requests=CPU),
     m.pod(labels={"tier": "batch", QOS: "BE"}, requests=BATCH, priorityClassName="koord-batch", priority=5000)),
    ("skip-update-resources",
     m.profile("keeps-cpu", meta_annotations=SKIP, selector={"matchLabels": {"app": "spark"}}, qosClass="BE",
               priorityClassName="koord-batch"),
     m.pod(labels={"app": "spark"}, requests=CPU, limits=CPU),
     m.pod(labels={"app": "web"}, requests=CPU, limits=CPU),
     m.pod(labels={"app": "spark", QOS: "BE"}, requests=CPU, limits=CPU, priorityClassName="koord-batch",
           priority=5000)),
    ("no priority class",
     m.profile("qos-only", selector={"matchLabels": {"app": "cache"}}, qosClass="LS"),
     m.pod(labels={"app": "cache"}, requests=CPU),
     m.pod(labels={"app": "web"}, requests=CPU),
     m.pod(labels={"app": "cache", QOS: "LS"}, requests=CPU)),
    ("koord-mid",
     m.profile("mid", selector={"matchLabels": {"app": "etl"}}, priorityClassName="koord-mid"),
     m.pod(labels={"app": "etl"}, requests=CPU, limits=CPU,
           initContainers=[{"name": "init", "image": "busybox", "resources": {"requests": CPU}}]),
     m.pod(labels={"app": "etl2"}, requests=CPU, limits=CPU),
     m.pod(labels={"app": "etl"}, requests={"koordinator.sh/mid-cpu": "500", "koordinator.sh/mid-memory": "256Mi"},
           priorityClassName="koord-mid", priority=7000)),
]
IDS = [c[0] for c in CASES]


def _policy(objects: list[dict[str, Any]], profile: str) -> Policy:
    name = "colocation-profile-" + profile
    (pol,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == name]
    (bind,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] == name]
    return Policy(pol, bind)


def _rendered(state: ClusterState) -> profile_policies.Rendered:
    return profile_policies.render(state.colocation_profiles(), state.priority_class)


def _judge(policy: Policy, state: ClusterState, pod: dict[str, Any]) -> Any:
    ns = pod["metadata"]["namespace"]
    request = {"operation": "CREATE", "namespace": ns, "resource": {"group": "", "version": "v1", "resource": "pods"},
               "object": pod, "oldObject": None}
    return policy.evaluate(request, state.namespace_labels(ns))


@pytest.mark.parametrize(("name", "profile", "matched", "unmatched", "compliant"), CASES, ids=IDS)
def test_a_profile_policy_refuses_only_the_pods_the_webhook_would_have_converted(
        name: str, profile: dict[str, Any], matched: dict[str, Any], unmatched: dict[str, Any],
        compliant: dict[str, Any]) -> None:
    state = m.make_state(profile)
    policy = _policy(_rendered(state).objects, profile["metadata"]["name"])
    decision, converted = m.mutate(copy.deepcopy(matched), state)
    assert decision.allowed and converted is not None and converted != matched, "the profile must change the pod"
    verdict = _judge(policy, state, converted)
    assert verdict.matched and verdict.allowed, f"the converted pod is refused: {verdict.message}"
    down = _judge(policy, state, matched)  # the webhook did not run
    assert (down.matched, down.allowed, down.error) == (True, False, False)
    assert down.message == profile_policies.message(profile["metadata"]["name"])
    assert "colocation webhook did not run" in down.message and profile["metadata"]["name"] in down.message
    assert not _judge(policy, state, unmatched).matched
    written = _judge(policy, state, compliant)
    assert written.allowed, f"the pod the user wrote compliant is refused: {written.message}"
    # A marker alone gets nobody through: the mutating chain's own annotations on the unconverted pod.
    marked = copy.deepcopy(matched)
    marked["metadata"]["annotations"] = dict(converted["metadata"].get("annotations") or {})
    assert not _judge(policy, state, marked).allowed


def test_profiles_that_combine_accept_each_others_outcome() -> None:
    """Both match; the later (by name) wins the QoS class and class: the earlier's policy admits the result."""
    first = m.profile("a-batch", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch")
    second = m.profile("b-mid", selector={"matchLabels": {"app": "x"}}, qosClass="LS", priorityClassName="koord-mid")
    state = m.make_state(first, second)
    objects = _rendered(state).objects
    _, converted = m.mutate(m.pod(labels={"app": "x"}, requests=CPU), state)
    assert converted is not None and converted["spec"]["priorityClassName"] == "koord-mid"
    for name in ("a-batch", "b-mid"):
        assert _judge(_policy(objects, name), state, converted).allowed


@pytest.mark.parametrize(("name", "profile", "note"), [
    ("probability", m.profile("half", probability=50, qosClass="BE", priorityClassName="koord-batch"),
     "half: no policy: probability 50%"),
    ("invalid", m.profile("broken", qosClass="XX"), "broken: no policy: the profile is invalid"),
    ("nothing to check", m.profile("labels-only", labels={"a": "b"}), "labels-only: no policy: it sets neither"),
    ("a selector no binding takes",
     m.profile("odd", selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["a b"]}]},
               qosClass="BE", priorityClassName="koord-batch"),
     "odd: no policy: a binding cannot hold its selector: selector.matchExpressions[0]: a valid label must be"),
], ids=["probability", "invalid", "nothing to check", "selector"])
def test_a_profile_a_policy_cannot_hold_gets_none_and_a_note(name: str, profile: dict[str, Any], note: str) -> None:
    rendered = _rendered(m.make_state(profile))
    assert rendered.objects == []
    assert [n for n in rendered.notes if n.startswith(note)], rendered.notes


# -- the command, the schema, staleness ---------------------------------------------------------------------------
def _state_dir(tmp_path: Path, *profiles: dict[str, Any]) -> Path:
    d = tmp_path / "state"
    d.mkdir(exist_ok=True)
    objects = [*m.KOORD_CLASSES, *m.NAMESPACES, *profiles]
    (d / "state.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return d


def test_the_policies_command_renders_the_profile_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = _state_dir(tmp_path, EXAMPLE, m.profile("half", probability=50, qosClass="BE"))
    assert webhook_cli.main(["policies", "--cluster-state", str(state_dir)]) == 0
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert docs[:2] == [policies.policy(), policies.binding()]
    assert docs[2:4] == profile_policies.band_policy([])
    assert docs[4:] == _rendered(m.make_state(EXAMPLE, m.profile("half", probability=50, qosClass="BE"))).objects
    assert [d["metadata"]["name"] for d in docs[4:]] == ["colocation-profile-colocation-profile-example"] * 2
    assert "note: half: no policy: probability 50%" in err
    assert webhook_cli.main(["policies", "--cluster-state", str(state_dir), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == docs


def test_the_rendered_objects_pass_the_strict_schema() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a test extra")
    version = kubernetes_validate.utils.latest_version()
    objects = _rendered(m.make_state(*(c[1] for c in CASES))).objects
    assert len(objects) == 2 * len(CASES)
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def _check(tmp_path: Path, state_dir: Path, applied: list[dict[str, Any]],
           capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "applied.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": applied}))
    code = webhook_cli.main(["policies", "--cluster-state", str(state_dir), "--check", str(path)])
    return code, capsys.readouterr().out


def test_check_lists_missing_stale_and_left_over_policies(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    other = m.profile("by-label", selector={"matchLabels": {"tier": "batch"}}, qosClass="BE",
                      priorityClassName="koord-batch")
    applied = [policies.policy(), policies.binding(), *profile_policies.band_policy([]),
               *_rendered(m.make_state(EXAMPLE, other)).objects]
    code, out = _check(tmp_path, _state_dir(tmp_path, EXAMPLE, other), applied, capsys)
    assert (code, out) == (0, "the applied policies are up to date (the pod invariants, the band conversion and "
                              "2 profile(s))\n")
    # The example now selects another label, by-label is gone, and a new profile was never applied.
    changed = copy.deepcopy(EXAMPLE)
    changed["spec"]["selector"] = {"matchLabels": {"colocate": "yes"}}
    new = m.profile("new-one", qosClass="BE", priorityClassName="koord-batch")
    code, out = _check(tmp_path, _state_dir(tmp_path, changed, new), applied, capsys)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 5, out  # the example's policy is what it was: only its binding is stale
    name = "colocation-profile-colocation-profile-example"
    assert f"ValidatingAdmissionPolicyBinding/{name}: profile colocation-profile-example: stale: " \
           "spec.matchResources.objectSelector.matchLabels.colocate: missing; " \
           "spec.matchResources.objectSelector.matchLabels.koordinator.sh/enable-colocation: not rendered (edited in the cluster, or the " \
           "cluster state changed since it was applied)" in lines, out
    assert "ValidatingAdmissionPolicy/colocation-profile-by-label: profile by-label: gone or no longer rendered: " \
           "delete it" in lines
    assert "ValidatingAdmissionPolicy/colocation-profile-new-one: profile new-one: not applied" in lines


def test_check_needs_a_cluster_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert webhook_cli.main(["policies", "--check", str(tmp_path / "x.yaml")]) == 2
    assert "--check compares with the profiles of a cluster state" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "profiles", "pod"), [
    ("a koord-mid container that already asks for mid-cpu keeps its cpu",
     [m.profile("mid", selector={"matchLabels": {"app": "etl"}}, priorityClassName="koord-mid")],
     m.pod(labels={"app": "etl"}, requests={"cpu": "1", "kubernetes.io/mid-cpu": "500"})),
    ("a patch writes another QoS class",
     [m.profile("patched", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch",
                patch={"metadata": {"labels": {QOS: "LS"}}})],
     m.pod(labels={"app": "x"})),
    ("a later profile's labels write the QoS class",
     [m.profile("a", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch"),
      m.profile("b", selector={"matchLabels": {"app": "x"}}, labels={QOS: "LS"})],
     m.pod(labels={"app": "x"})),
    ("another profile skips the conversion",
     [m.profile("a", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch"),
      m.profile("b", meta_annotations=SKIP, selector={"matchLabels": {"app": "x"}}, qosClass="BE")],
     m.pod(labels={"app": "x"}, requests=CPU)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_what_the_webhook_admits_the_profile_policies_admit(name: str, profiles: list[dict[str, Any]],
                                                            pod: dict[str, Any]) -> None:
    state = m.make_state(*profiles)
    objects = _rendered(state).objects
    decision, converted = m.mutate(copy.deepcopy(pod), state)
    assert decision.allowed and converted is not None
    judged = [o["metadata"]["annotations"][profile_policies.PROFILE_ANNOTATION] for o in objects
              if o["kind"] == "ValidatingAdmissionPolicy"]
    assert judged
    for profile in judged:
        verdict = _judge(_policy(objects, profile), state, converted)
        assert verdict.matched and verdict.allowed, f"{profile}: {verdict.message}"


def test_a_pod_the_webhook_could_not_apply_the_profile_to_is_refused_as_documented() -> None:
    """docs/policies.md, "One difference with the webhook up": the webhook admits it unchanged with a warning."""
    profile = m.profile("suffixed", selector={"matchLabels": {"app": "x"}}, qosClass="BE",
                        priorityClassName="koord-batch", labelSuffixes={"name": "-" + "s" * 40})
    state = m.make_state(profile)
    pod = m.pod(labels={"app": "x", "name": "n" * 40})
    decision, converted = m.mutate(copy.deepcopy(pod), state)
    assert decision.allowed and converted == pod and "colocation profile suffixed not applied" in decision.warnings[0]
    assert _judge(_policy(_rendered(state).objects, "suffixed"), state, converted).message == \
        profile_policies.message("suffixed")


def _applied_as_the_apiserver_stores(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``kubectl get -o yaml`` gives back: metadata the apiserver adds and the fields it defaults."""
    out = copy.deepcopy(objects)
    for o in out:
        o["metadata"].update(uid="0d3e", resourceVersion="42", generation=1, creationTimestamp="2026-11-28T12:00:00Z")
        spec = o["spec"]
        if o["kind"] == "ValidatingAdmissionPolicy":
            spec["matchConstraints"].update(namespaceSelector={}, objectSelector={})
        else:
            spec["matchResources"].setdefault("objectSelector", {})
            spec["matchResources"].setdefault("matchPolicy", "Equivalent")
            spec["matchResources"].setdefault("namespaceSelector", {})
    return out


def test_check_compares_field_by_field_not_the_digest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A policy edited in the cluster keeps its digest annotation: --check still names the field."""
    state_dir = _state_dir(tmp_path, EXAMPLE)
    applied = _applied_as_the_apiserver_stores([policies.policy(), policies.binding(),
                                                *profile_policies.band_policy([]),
                                                *_rendered(m.make_state(EXAMPLE)).objects])
    code, out = _check(tmp_path, state_dir, applied, capsys)
    assert code == 0, out
    edited = copy.deepcopy(applied)
    (pol,) = [o for o in edited if o["metadata"]["name"] == "colocation-profile-colocation-profile-example"
              and o["kind"] == "ValidatingAdmissionPolicy"]
    pol["spec"]["validations"][0]["expression"] = "true"
    (band,) = [o for o in edited if o["metadata"]["name"] == profile_policies.BAND_POLICY_NAME
               and o["kind"] == "ValidatingAdmissionPolicyBinding"]
    band["spec"]["validationActions"] = ["Warn"]
    code, out = _check(tmp_path, state_dir, edited, capsys)
    assert code == 1
    assert out.splitlines() == [
        "ValidatingAdmissionPolicyBinding/colocation-band-conversion: stale: spec.validationActions[0]: differs "
        "(edited in the cluster, or the cluster state changed since it was applied)",
        "ValidatingAdmissionPolicy/colocation-profile-colocation-profile-example: profile colocation-profile-example: "
        "stale: spec.validations[0].expression: differs (edited in the cluster, or the cluster state changed since "
        "it was applied)"]
    missing = [o for o in applied if o["metadata"]["name"] != policies.POLICY_NAME]
    code, out = _check(tmp_path, state_dir, missing, capsys)
    assert (code, out.splitlines()) == (1, [f"ValidatingAdmissionPolicy/{policies.POLICY_NAME}: not applied",
                                            f"ValidatingAdmissionPolicyBinding/{policies.POLICY_NAME}: not applied"])


# -- the band conversion: pods of koord-batch and koord-mid without a profile --------------------------------------
MID = {"kubernetes.io/mid-cpu": "500", "kubernetes.io/mid-memory": "256Mi"}
BAND_CASES: list[tuple[str, dict[str, Any]]] = [
    ("koord-batch", m.pod(requests=CPU, limits=CPU, priorityClassName="koord-batch", priority=5000)),
    ("koord-batch, BE stated", m.pod(labels={QOS: "BE"}, requests=CPU, priorityClassName="koord-batch",
                                     priority=5000)),
    ("koord-mid", m.pod(requests=CPU, limits=CPU, priorityClassName="koord-mid", priority=7000)),
    ("a limit without a request", m.pod(limits={"cpu": "1"}, priorityClassName="koord-batch", priority=5000)),
    ("memory only", m.pod(requests={"memory": "1Gi"}, priorityClassName="koord-batch", priority=5000)),
    ("an init container", m.pod(priorityClassName="koord-batch", priority=5000, initContainers=[
        {"name": "init", "image": "busybox", "resources": {"requests": CPU}}])),
    ("the pod level", m.pod(requests={"cpu": "500m"}, priorityClassName="koord-batch", priority=5000,
                            resources={"requests": {"cpu": "500m"}})),
]


def _band_judge(pod: dict[str, Any], objects: list[dict[str, Any]] | None = None,
                labels: dict[str, str] | None = None) -> Any:
    (pol,) = [o for o in objects or profile_policies.band_policy([]) if o["kind"] == "ValidatingAdmissionPolicy"]
    (bind,) = [o for o in objects or profile_policies.band_policy([])
               if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    ns = pod["metadata"]["namespace"]
    request = {"operation": "CREATE", "namespace": ns, "resource": {"group": "", "version": "v1", "resource": "pods"},
               "object": pod, "oldObject": None}
    return Policy(pol, bind).evaluate(request, labels)


@pytest.mark.parametrize(("name", "pod"), BAND_CASES, ids=[c[0] for c in BAND_CASES])
def test_the_band_policy_refuses_a_band_pod_the_webhook_did_not_convert(name: str, pod: dict[str, Any]) -> None:
    state = m.make_state()
    decision, converted = m.mutate(copy.deepcopy(pod), state)
    assert decision.allowed and converted is not None and converted != pod, "the webhook must convert it"
    assert _band_judge(converted).allowed, "the pod the webhook converted is refused"
    down = _band_judge(pod)
    assert (down.matched, down.allowed, down.error) == (True, False, False)
    band = "koord-mid" if pod["spec"]["priority"] == 7000 else "koord-batch"
    names = ("mid-cpu and kubernetes.io/mid-memory" if band == "koord-mid"
             else "batch-cpu and kubernetes.io/batch-memory")
    assert down.message == (f"the colocation webhook did not run on this pod: its priority {pod['spec']['priority']} "
                            f"is in the {band} band, whose pods ask for kubernetes.io/{names} in place of cpu and "
                            "memory, and it still asks for cpu or memory; create it again once the webhook is back")


@pytest.mark.parametrize(("name", "pod"), [
    ("no band", m.pod(requests=CPU, limits=CPU)),
    ("koord-prod", m.pod(requests=CPU, priorityClassName="koord-prod", priority=9000)),
    ("koord-free", m.pod(requests=CPU, priorityClassName="koord-free", priority=3000)),
    ("batch resources", m.pod(requests=BATCH, limits=BATCH, priorityClassName="koord-batch", priority=5000)),
    ("mid resources", m.pod(requests=MID, priorityClassName="koord-mid", priority=7000)),
    ("no resources", m.pod(priorityClassName="koord-batch", priority=5000)),
    # The webhook leaves a container that already names the band's resources as written (the mix is the
    # validating rules' business): so does the policy.
    ("a container already asking for batch-cpu", m.pod(requests={"cpu": "1", "kubernetes.io/batch-cpu": "500"},
                                                     priorityClassName="koord-batch", priority=5000)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_band_policy_admits_what_the_webhook_leaves_alone(name: str, pod: dict[str, Any]) -> None:
    _, converted = m.mutate(copy.deepcopy(pod), m.make_state())
    for judged in (pod, converted):
        if judged is not None:
            assert _band_judge(judged).allowed, _band_judge(judged).message


def test_the_rendered_band_policy_leaves_out_the_pods_of_profiles_that_skip_the_conversion() -> None:
    skip = m.profile("keeps-cpu", meta_annotations=SKIP, namespaceSelector={"matchLabels": {"team": "spark"}},
                     selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["spark"]},
                                                    {"key": "canary", "operator": "DoesNotExist"}]})
    rendered = _rendered(m.make_state(skip))
    assert any(n.startswith("colocation-band-conversion: the pods profile(s) keeps-cpu match are left out")
               for n in rendered.notes), rendered.notes
    band = m.pod(ns="spark-jobs", labels={"app": "spark"}, requests=CPU, priorityClassName="koord-batch",
                 priority=5000)
    decision, converted = m.mutate(copy.deepcopy(band), m.make_state(skip, {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark-jobs", "labels": {"team": "spark"}}}))
    assert decision.allowed and converted == band, "the webhook leaves the skipped pod's cpu/memory"
    assert _band_judge(band, rendered.band, {"team": "spark"}).allowed
    assert not _band_judge(band, rendered.band, {"team": "web"}).allowed  # another namespace: not the profile's
    canary = copy.deepcopy(band)
    canary["metadata"]["labels"]["canary"] = "1"
    assert not _band_judge(canary, rendered.band, {"team": "spark"}).allowed
    assert not _band_judge(band, profile_policies.band_policy([]), {"team": "spark"}).allowed  # the shipped one


def test_the_committed_band_policy_is_what_the_generator_renders() -> None:
    path = Path(__file__).resolve().parents[2] / "manifests/components/admission-policies/band-conversion.yaml"
    assert path.read_text() == profile_policies.render_band(), \
        f"run: python -m webhook.policies.profiles > {path}"
