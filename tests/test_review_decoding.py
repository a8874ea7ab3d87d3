"""The envelope's two decoders agree: msgspec straight into the dataclasses (the server's path), and orjson with the
field-by-field checks (what names a fault, and the offline commands' path, ``complete=True``).

Whatever msgspec accepts, the checks accept too and decode to the same review, but for what msgspec leaves out on
purpose: the object's ``managedFields`` (and fields outside a pod's and ObjectMeta's). Whatever it refuses,
``decode_review`` answers as the checks do. And the rules answer the same with or without what was left out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from kubernetes.client import V1ObjectMeta, V1Pod

from tests.conftest import load_fixture
from tests.test_fuzz_reviews import REVIEWS, mutated_review
from webhook.admission import chain
from webhook.admission.review import (
    _DECODER,
    AdmissionReview,
    ObjectMeta,  # defined at run time only (to the type checker the object is a dict)
    ReviewedObject,
    ReviewError,
    decode_review,
    review_from_dict,
)
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

OBJECT_FIELDS = set(ReviewedObject.__annotations__)
META_FIELDS = set(ObjectMeta.__annotations__)
BODIES = [orjson.dumps(r) for r in REVIEWS]
ENVELOPE = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}


def _reference(body: bytes) -> AdmissionReview | str:
    """What the checks make of ``body``: the review, or the error they name."""
    try:
        return review_from_dict(orjson.loads(body))
    except orjson.JSONDecodeError:
        return "not JSON"
    except ReviewError as exc:
        return exc.message


def _as_reviewed(obj: Any) -> Any:
    """An object as msgspec decodes it: a pod's fields, the metadata's without managedFields."""
    if not isinstance(obj, dict):
        return obj
    out = {k: v for k, v in obj.items() if k in OBJECT_FIELDS}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k in META_FIELDS}
    return out


def _exact_ints_as_floats(value: Any) -> Any:
    """orjson reads an integer beyond 64 bits as a float, msgspec keeps it exact: compared as orjson has it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -2**63 <= value < 2**64:
        return float(value)
    if isinstance(value, dict):
        return {k: _exact_ints_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact_ints_as_floats(v) for v in value]
    return value


def _without_left_out(review: AdmissionReview) -> AdmissionReview:
    req = review.request
    return dataclasses.replace(review, request=dataclasses.replace(
        req, object=_as_reviewed(req.object), oldObject=_as_reviewed(req.oldObject)))


@contextlib.contextmanager
def _default_recursion_limit() -> Iterator[None]:
    """msgspec nests as deep as Python's recursion limit lets it: 1000 in the server, under orjson's 1024. Hypothesis
    raises the limit while a test runs; the server's is put back for the decoding."""
    raised = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(raised)


def _envelope(**request: Any) -> bytes:
    return json.dumps({**ENVELOPE, "request": {"uid": "u", "operation": "CREATE", **request}}).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=mutated_review())
@example(body=_envelope(uid=""))
@example(body=_envelope(name=None))
@example(body=_envelope(dryRun=None))
@example(body=_envelope(object={"metadata": [1, 2]}))
@example(body=_envelope(object={"metadata": None, "spec": {}}))
@example(body=_envelope(oldObject={"metadata": {"managedFields": [], "name": 5}, "extra": 1}))
@example(body=_envelope(userInfo={"extra": {"n": 2**70}}))
@example(body=b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",'
              b'"name":"a","name":"b","object":{"metadata":{"name":"x","name":"y"}}}}')
@example(body=b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",'
              b'"object":{"metadata":{"name":"\\ud800"}}}}')
@example(body=b"[" * 5000 + b"]" * 5000)
def test_what_msgspec_decodes_the_checks_decode_alike(body: bytes) -> None:
    reference = _reference(body)
    with _default_recursion_limit():
        try:
            fast: AdmissionReview | None = _DECODER.decode(body)
        except Exception:
            fast = None
    if fast is not None:
        assert isinstance(reference, AdmissionReview), f"msgspec accepted what the checks refuse: {reference}"
        assert _exact_ints_as_floats(fast) == _exact_ints_as_floats(_without_left_out(reference))
        assert fast.request.is_pod == reference.request.is_pod
    with _default_recursion_limit():
        try:
            served: AdmissionReview | str = decode_review(body)
        except ReviewError as exc:
            served = exc.message
    if fast is not None:
        assert served == fast
    elif isinstance(reference, str) and reference != "not JSON":
        assert served == reference  # the same field-named error
    elif isinstance(reference, AdmissionReview):
        assert served == reference  # stricter than the checks on this one: decoded as before
    else:
        assert isinstance(served, str) and served.startswith("request body is not JSON")


@pytest.mark.parametrize("body", BODIES, ids=[f"review{i}" for i in range(len(BODIES))])
def test_every_recorded_review_takes_the_fast_path(body: bytes) -> None:
    fast = _DECODER.decode(body)
    assert decode_review(body) == fast
    assert fast == _without_left_out(review_from_dict(orjson.loads(body)))


def test_managed_fields_are_left_out_on_the_servers_path_only() -> None:
    recorded = load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json")
    assert "managedFields" in recorded["request"]["object"]["metadata"]  # as the apiserver sent it
    body = orjson.dumps(recorded)
    assert "managedFields" not in decode_review(body).request.object["metadata"]
    assert decode_review(body, complete=True).request.object == recorded["request"]["object"]


def test_what_is_kept_is_every_field_of_the_api_but_managed_fields() -> None:
    """Against the Kubernetes client's own models of a Pod and of ObjectMeta (their JSON names)."""
    assert set(V1Pod.attribute_map.values()) == OBJECT_FIELDS
    assert META_FIELDS - {"clusterName"} == set(V1ObjectMeta.attribute_map.values()) - {"managedFields"}


def test_is_pod_is_worked_out_whatever_the_body_says() -> None:
    body = _envelope(resource={"group": "", "version": "v1", "resource": "pods"}, subResource="status", is_pod=True)
    assert decode_review(body).request.is_pod is False
    assert decode_review(_envelope(resource={"group": "", "version": "v1", "resource": "pods"})).request.is_pod


@pytest.fixture(scope="module")
def state() -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    return state


@pytest.mark.parametrize("body", BODIES, ids=[f"review{i}" for i in range(len(BODIES))])
def test_the_rules_answer_alike_without_what_was_left_out(state: ClusterState, body: bytes) -> None:
    lean, complete = decode_review(body), decode_review(body, complete=True)
    for run in (chain.mutate, chain.validate):
        assert run(lean.request, state, chain.Settings()) == run(complete.request, state, chain.Settings())
