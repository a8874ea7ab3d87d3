"""The mutating chain (every rule together) on recorded reviews."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
from msgspec.structs import replace

from tests.conftest import load_fixture
from tests.mutating import (
    make_state,
    namespace,
    profile,
)
from webhook.admission import chain
from webhook.admission.review import AdmissionRequest, review_from_dict
from webhook.cluster.state import ClusterState
from webhook.core.priority import resolve_priority

COLO = {"koordinator.sh/enable-colocation": "true"}
ESPEC = "node.koordinator.sh/extended-resource-spec"



# -- recorded reviews ------------------------------------------------------------------------------------
def _recorded(name: str) -> AdmissionRequest:
    return review_from_dict(load_fixture(f"admission/{name}")).request


def _example_state(*extra: dict[str, Any]) -> ClusterState:
    return make_state(namespace("webhook-test"), profile(
        "colocation-profile-example", namespaceSelector={"matchLabels": COLO}, selector={"matchLabels": COLO},
        qosClass="BE", priorityClassName="koord-batch", koordinatorPriority=1000, schedulerName="koord-scheduler",
        labels={"koordinator.sh/mutated": "true"}), *extra)


def test_recorded_koord_batch_init_containers() -> None:

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

    req = _recorded("v1-mutate-create-deployment-pod.json")
    assert req.object is not None
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


def _reaction(case: str) -> dict[str, Any]:
    return next(c for c in load_fixture("admission/apiserver-reactions.json") if c["case"] == case)


def test_reinvoked_priority_plugin_rejects_a_class_only_patch_as_recorded() -> None:

    case = _reaction("patch-priorityclassname-only")
    obj = case["admission_review_request"]["request"]["object"]
    patched = jsonpatch.apply_patch(obj, case["webhook_response_patch_decoded"])
    res = resolve_priority(patched["spec"], make_state().priority_class, None)
    assert res.error is not None
    assert f'pods "{obj["metadata"]["name"]}" is forbidden: {res.error}' in case["kubectl_stderr"]


def test_profile_class_change_passes_the_reinvoked_priority_plugin() -> None:

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

    doc: dict[str, Any] = {"spec": {}}
    pb = PatchBuilder(doc)
    container = {"name": "a", "resources": {"requests": {"cpu": "1"}}}
    pb.set(("spec", "containers"), [container])
    pb.remove(("spec", "containers", 0, "resources", "requests", "cpu"))
    assert pb.ops[0]["value"] == [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]
    assert pb.set(("metadata", "labels", "a"), "1") and pb.ops[-1] == {
        "op": "add", "path": "/metadata", "value": {"labels": {"a": "1"}}}
    assert not pb.set(("metadata", "labels", "a"), "1")
