"""The envelope's one schema (review.py's msgspec Structs): every recorded review decodes, a bad envelope gets a 400
that names the field and its value, the OpenAPI page publishes the same schema, and what the server's decoding
leaves out of the object (``managedFields``) changes no rule's answer.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from kubernetes.client import V1ObjectMeta, V1Pod

from tests.conftest import load_fixture
from tests.e2e.test_fuzz_reviews import mutated_review
from tests.serving import FIXTURES
from webhook.admission import chain
from webhook.admission.review import (
    ObjectMeta,
    ReviewedObject,
    ReviewError,
    decode_review,
    review_from_dict,
)
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.server.app import create_app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "admissionreview-koord-batch.json"


def _recorded(doc: Any) -> list[dict[str, Any]]:
    """Every AdmissionReview request in a recorded file (a body, or the reviews a case file holds)."""
    if isinstance(doc, list):
        return [r for d in doc for r in _recorded(d)]
    if not isinstance(doc, dict):
        return []
    if doc.get("kind") == "AdmissionReview" and "request" in doc:
        return [doc]
    return [r for v in doc.values() for r in _recorded(v)]


RECORDED = {f"{p.name}#{i}": review for p in [*sorted((FIXTURES / "admission").glob("*.json")), EXAMPLE]
            for i, review in enumerate(_recorded(json.loads(p.read_bytes())))}
BODIES = {name: orjson.dumps(review) for name, review in RECORDED.items()}
REQUEST = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "userInfo": {}}


def _envelope(**request: Any) -> bytes:
    """A minimal valid review with ``request`` changed; ``...`` leaves the field out."""
    fields = {k: v for k, v in {**REQUEST, **request}.items() if v is not ...}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": fields}).encode()


def _refusal(body: bytes) -> str:
    with pytest.raises(ReviewError) as refused:
        decode_review(body)
    assert refused.value.status == 400
    return refused.value.message


def test_every_recorded_review_decodes() -> None:
    assert len(RECORDED) >= 35  # the admission fixtures, the reviews the case files hold, the example
    for name, body in BODIES.items():
        review = decode_review(body)
        assert review.request.uid == RECORDED[name]["request"]["uid"], name
        assert review_from_dict(RECORDED[name]) == review, name


BAD = [
    ("empty", b"", "request body is empty; expected an AdmissionReview JSON object"),
    ("null", b"null", "request body must be a JSON object (an AdmissionReview), got null"),
    ("an array", b"[1, 2]", "request body must be a JSON object (an AdmissionReview), got an array"),
    ("a number", b"5", "request body must be a JSON object (an AdmissionReview), got 5"),
    ("not JSON", b"{nope", "request body is not JSON: object keys must be strings (byte 1)"),
    ("cut short", b'{"apiVersion": "adm', "request body is not JSON: input data was truncated"),
    ("too deep", _envelope(object={"spec": 0}).replace(b'"spec": 0', b'"spec": ' + b"[" * 5000 + b"]" * 5000),
     "request body nests too deep to decode (about 1000 levels at most)"),
    ("no field", b"{}", "invalid AdmissionReview: apiVersion, kind, request are missing"),
    ("kind only", b'{"kind": "AdmissionReview"}', "invalid AdmissionReview: apiVersion, request are missing"),
    ("null apiVersion", b'{"apiVersion": null}',
     "invalid AdmissionReview: apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, got null"),
    ("unknown apiVersion", b'{"apiVersion": "admission.k8s.io/v2"}',
     "invalid AdmissionReview: apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, "
     "got 'admission.k8s.io/v2'"),
    ("wrong kind", b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}',
     "invalid AdmissionReview: kind must be AdmissionReview, got 'Pod'"),
    ("request a list", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": [1]}',
     "invalid AdmissionReview: request must be an object, got an array"),
    ("empty request", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
     "invalid AdmissionReview: request.uid, request.kind, request.resource, request.operation, request.userInfo "
     "are missing"),
    ("no resource", _envelope(resource=...), "invalid AdmissionReview: request.resource is missing"),
    ("no kind", _envelope(kind=...), "invalid AdmissionReview: request.kind is missing"),
    ("no userInfo", _envelope(userInfo=...), "invalid AdmissionReview: request.userInfo is missing"),
    ("resource without group", _envelope(resource={"version": "v1", "resource": "pods"}),
     "invalid AdmissionReview: request.resource.group is missing"),
    ("empty uid", _envelope(uid=""), "invalid AdmissionReview: request.uid must be a non-empty string, got ''"),
    ("uid a number", _envelope(uid=0), "invalid AdmissionReview: request.uid must be a non-empty string, got 0"),
    ("uid out of range", _envelope(uid=1).replace(b'"uid": 1', b'"uid": 1e400'),
     "invalid AdmissionReview: request.uid: number out of range"),
    ("bad operation", _envelope(operation="EXPLODE"),
     "invalid AdmissionReview: request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got 'EXPLODE'"),
    ("operation a long text", _envelope(operation="X" * 50),
     "invalid AdmissionReview: request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, "
     "got a string of 50 characters"),
    ("operation null", _envelope(operation=None),
     "invalid AdmissionReview: request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got null"),
    ("name a number", _envelope(name=5), "invalid AdmissionReview: request.name must be a string, got 5"),
    ("kind a string", _envelope(kind="Pod"), "invalid AdmissionReview: request.kind must be an object, got 'Pod'"),
    ("resource group null", _envelope(resource={"group": None, "version": "v1", "resource": "pods"}),
     "invalid AdmissionReview: request.resource.group must be a string, got null"),
    ("dryRun null", _envelope(dryRun=None), "invalid AdmissionReview: request.dryRun must be a boolean, got null"),
    ("dryRun a text", _envelope(dryRun="true"),
     "invalid AdmissionReview: request.dryRun must be a boolean, got 'true'"),
    ("userInfo a list", _envelope(userInfo=[]), "invalid AdmissionReview: request.userInfo must be an object, got an array"),
    ("object a list", _envelope(object=[1]),
     "invalid AdmissionReview: request.object must be an object or null, got an array"),
    ("metadata a list", _envelope(object={"metadata": [1, 2]}),
     "invalid AdmissionReview: request.object.metadata must be an object, got an array"),
    ("oldObject metadata null", _envelope(oldObject={"metadata": None}),
     "invalid AdmissionReview: request.oldObject.metadata must be an object, got null"),
    ("options a number", _envelope(options=1.5),
     "invalid AdmissionReview: request.options must be an object or null, got 1.5"),
]


@pytest.fixture(autouse=True)
def _default_recursion_limit() -> Iterator[None]:
    """The server runs with Python's default recursion limit (1000), which bounds how deep msgspec decodes; other
    tests' libraries raise it for the whole process (cel-python sets 2500, hypothesis more while it runs)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(before)


@pytest.mark.parametrize("body,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_envelope_gets_a_400_naming_the_field_and_its_value(body: bytes, message: str) -> None:
    assert _refusal(body) == message


def test_data_already_parsed_gets_the_same_messages() -> None:
    for name, body, message in BAD:
        if message.startswith("invalid AdmissionReview") and "out of range" not in message:
            with pytest.raises(ReviewError) as refused:
                review_from_dict(json.loads(body))
            assert refused.value.message == message, name


def test_what_the_apiserver_always_sends_is_required() -> None:
    """Each field of a recorded review that the API always carries (no omitempty) left out in turn: a 400 that
    names it. Without ``resource`` every rule would skip the review (not a pod) and admit it."""
    recorded = RECORDED["v1-mutate-create-plain.json#0"]
    for path in (("uid",), ("kind",), ("resource",), ("operation",), ("userInfo",), ("kind", "group"),
                 ("kind", "version"), ("kind", "kind"), ("resource", "group"), ("resource", "version"),
                 ("resource", "resource")):
        review = copy.deepcopy(recorded)
        parent = review["request"]
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
        assert _refusal(orjson.dumps(review)) == f"invalid AdmissionReview: request.{'.'.join(path)} is missing"
    for optional in ("subResource", "name", "namespace", "object", "oldObject", "dryRun", "options",
                     "requestKind", "requestResource"):
        review = copy.deepcopy(recorded)
        review["request"].pop(optional, None)
        decode_review(orjson.dumps(review))


SAYS_WHERE = re.compile(r"request body (is|must|nests) |invalid AdmissionReview: (apiVersion|kind|request)\b")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=mutated_review())
def test_whatever_is_refused_is_a_400_that_says_where(body: bytes) -> None:
    try:
        decode_review(body)
    except ReviewError as exc:
        assert exc.status in (400, 413)
        assert SAYS_WHERE.match(exc.message) and "got None" not in exc.message, exc.message


def test_the_openapi_page_publishes_the_decoders_schema() -> None:
    """The schema on /openapi.json accepts every recorded review and refuses every bad envelope object above."""
    components = create_app(ClusterState(WEBHOOK_KINDS), openapi=True).openapi()["components"]
    schema = {"$ref": "#/components/schemas/AdmissionReview", "components": components}
    validator = jsonschema.Draft202012Validator(schema)
    for name, body in BODIES.items():
        assert not list(validator.iter_errors(json.loads(body))), name
    for name, body, message in BAD:
        if message.startswith("invalid AdmissionReview") and "out of range" not in message:
            assert list(validator.iter_errors(json.loads(body))), name
    request = components["schemas"]["AdmissionRequest"]
    assert request["required"] == ["uid", "kind", "resource", "operation", "userInfo"]
    assert "is_pod" not in request["properties"]  # worked out, never read from a body


def test_managed_fields_are_left_out_on_the_servers_path_only() -> None:
    recorded = load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json")
    assert "managedFields" in recorded["request"]["object"]["metadata"]  # as the apiserver sent it
    body = orjson.dumps(recorded)
    stripped = decode_review(body).request.object
    assert stripped is not None and "managedFields" not in stripped["metadata"]
    assert decode_review(body, complete=True).request.object == recorded["request"]["object"]


def test_what_is_kept_is_every_field_of_the_api_but_managed_fields() -> None:
    """Against the Kubernetes client's own models of a Pod and of ObjectMeta (their JSON names)."""
    assert set(V1Pod.attribute_map.values()) == set(ReviewedObject.__annotations__)
    assert set(ObjectMeta.__annotations__) - {"clusterName"} == set(V1ObjectMeta.attribute_map.values()) - {
        "managedFields"}


def test_is_pod_is_worked_out_whatever_the_body_says() -> None:
    assert decode_review(_envelope(subResource="status", is_pod=True)).request.is_pod is False
    assert decode_review(_envelope(subResource="resize")).request.is_pod is True     # in-place resize: judged
    assert decode_review(_envelope(is_pod=False)).request.is_pod is True
    assert decode_review(_envelope(resource={"group": "apps", "version": "v1", "resource": "pods"})).request.is_pod \
        is False


@pytest.fixture(scope="module")
def state() -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    return state


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_rules_answer_alike_without_what_was_left_out(state: ClusterState, name: str) -> None:
    lean, complete = decode_review(BODIES[name]), decode_review(BODIES[name], complete=True)
    for run in (chain.mutate, chain.validate):
        assert run(lean.request, state, chain.Settings()) == run(complete.request, state, chain.Settings())


# -- the review command, which decodes a file the same way --------------------------------------------------------
def _review_command(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from webhook.cli.webhook import main

    (tmp_path / "input.json").write_text(text)
    code = main(["review", str(tmp_path / "input.json"), "-o", "patch"])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_the_review_command_names_a_missing_resource(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    review = json.loads(EXAMPLE.read_bytes())
    del review["request"]["resource"]
    code, said = _review_command(tmp_path, json.dumps(review), capsys)
    assert (code, said) == (2, f"colocation-webhook: {tmp_path / 'input.json'}: invalid AdmissionReview: "
                               "request.resource is missing")


def test_the_review_command_says_null_is_no_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, said = _review_command(tmp_path, "null\n", capsys)
    assert (code, said) == (2, f"colocation-webhook: {tmp_path / 'input.json'}: holds null; expected one Pod or "
                               "AdmissionReview object")
    code, said = _review_command(tmp_path, "", capsys)
    assert said.endswith("input.json: is empty; expected one Pod or AdmissionReview object")
