"""The mutating chain works copy on write: request.object is never changed, the patch is the same as
on a private deep copy, and a recorded op never changes after it was recorded."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings

from tests.admission.test_chain_mutating_properties import _state, pods, profiles
from tests.conftest import load_fixture
from tests.mutating import make_state, profile, request
from webhook.admission import chain
from webhook.admission.domain.patch import PatchBuilder, apply_ops
from webhook.admission.review import review_from_dict

BATCH_PROFILE = profile("batch", selector={"matchLabels": {"app": "batch-init"}}, qosClass="BE",
                        priorityClassName="koord-batch", labels={"koordinator.sh/mutated": "true"},
                        patch={"metadata": {"annotations": {"a": "b"}},
                               "spec": {"containers": [{"name": "worker", "env": [{"name": "X", "value": "1"}]}]}})


@pytest.mark.parametrize("fixture", [
    "v1-mutate-create-koord-batch-init-containers.json",
    "v1-mutate-create-be-batch-resources.json",
    "v1-mutate-create-batch-resources.json",
    "v1-mutate-create-dryrun-koord-mid.json",
    "v1-mutate-create-plain.json",
])
def test_mutate_leaves_request_object_unchanged(fixture: str) -> None:
    req = review_from_dict(load_fixture(f"admission/{fixture}")).request
    before = copy.deepcopy(req.object)
    decision = chain.mutate(req, make_state(BATCH_PROFILE), chain.Settings())
    assert req.object == before
    assert decision.allowed, decision.message
    # applying the patch to the untouched input gives what the rules built
    again = chain.mutate(review_from_dict(load_fixture(f"admission/{fixture}")).request, make_state(BATCH_PROFILE),
                         chain.Settings())
    assert again.patch == decision.patch


@settings(max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pod=pods(), specs=profiles)
def test_mutate_never_changes_its_input(pod: dict[str, Any], specs: list[tuple[str, dict[str, Any], bool]]) -> None:
    state = _state(specs)
    given_pod = copy.deepcopy(pod)
    decision = chain.mutate(request(given_pod), state, chain.Settings())
    assert given_pod == pod
    if decision.allowed:
        ops = copy.deepcopy(decision.patch)
        expected = jsonpatch.apply_patch(pod, decision.patch)  # valid against the input
        assert decision.patch == ops
        # what `review` and `audit` apply: the same result, the input untouched (copy on write)
        assert apply_ops(pod, decision.patch) == expected and pod == given_pod


def test_patch_builder_copies_on_write() -> None:
    labels = {"a": "1"}
    containers = [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    doc: dict[str, Any] = {"metadata": {"labels": labels}, "spec": {"containers": containers}}
    original = copy.deepcopy(doc)
    pb = PatchBuilder(doc)
    pb.set(("metadata", "labels", "b"), "2")
    pb.set(("spec", "containers", 0, "resources", "requests"), {"kubernetes.io/batch-cpu": "1000"})
    pb.remove(("spec", "containers", 0, "name"))
    pb.update(("metadata",), {"labels": {"a": "1", "b": "2", "c": "3"}, "annotations": {"x": "y"}})
    pb.set(("spec", "overhead", "cpu"), "1")
    assert doc == original and labels == {"a": "1"} and containers == original["spec"]["containers"]
    assert pb.doc == jsonpatch.apply_patch(original, pb.ops)
    assert pb.doc["spec"]["containers"][0] == {"resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}


def test_later_write_below_an_added_value_keeps_the_op() -> None:
    pb = PatchBuilder({"spec": {}})
    value = {"containers": [{"name": "a", "env": []}]}
    pb.update(("spec",), value)
    pb.set(("spec", "containers", 0, "env"), [{"name": "X"}])
    pb.set(("spec", "containers", 0, "image"), "busybox")
    assert pb.ops[0] == {"op": "add", "path": "/spec/containers", "value": [{"name": "a", "env": []}]}
    assert value == {"containers": [{"name": "a", "env": []}]}  # the caller's value is not changed either


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("name, extra", [
    ("nested deeper than orjson writes", _deep(300)),
    ("integer beyond 64 bits", 10**30),
])
def test_an_object_orjson_cannot_write_never_breaks_an_answer(name: str, extra: object, cert_dir: Path) -> None:
    """The chain works on it; the server answers 200, or 400 when a patch value could not be written."""
    import base64
    import json

    from tests.mutating import pod
    from tests.serving import run_server

    p = pod()
    p["spec"]["extra"] = extra
    decision = chain.mutate(request(p), make_state(), chain.Settings())
    assert decision.allowed, name
    review: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "operation": "CREATE", "object": p, "userInfo": {},
                          "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "resource": {"group": "", "version": "v1", "resource": "pods"}}}
    body = json.dumps(review).encode()
    with run_server(make_state(), cert_dir) as srv, srv.client() as c:
        r = c.post("/mutate", content=body)
        assert r.status_code in (200, 400), r.text
        if r.status_code == 200:
            json.loads(base64.b64decode(r.json()["response"].get("patch", "") or "W10="))
        # a profile patch that copies the deep value into an op cannot be written: a clear 400
        p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": extra}}
        p["spec"]["priority"] = 5000
        review["request"]["object"] = p
        r = c.post("/mutate", content=json.dumps(review).encode())
        assert r.status_code in (200, 400), r.text
        if r.status_code == 400:
            assert "cannot be written back in a patch" in r.json()["error"]


def test_malformed_resources_on_a_be_pod_outside_the_batch_band_is_no_internal_error() -> None:
    from tests.mutating import pod

    p = pod()
    p["metadata"].setdefault("labels", {})["koordinator.sh/qosClass"] = "BE"
    p["spec"]["priority"] = 0
    p["spec"]["containers"][0]["resources"] = "x"
    decision = chain.mutate(request(p), make_state(), chain.Settings())
    assert not decision.rule_failed and decision.code != 500, decision.message
