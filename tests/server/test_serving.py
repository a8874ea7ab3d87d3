"""The HTTP edge over real TLS: protocol versions, uid echo, patches, bad input, health, metrics."""

from __future__ import annotations

import base64
import json
import re
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import load_fixture
from tests.serving import FIXTURES, Server, run_server
from webhook import __version__
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

RECORDED = sorted(p.name for p in (FIXTURES / "admission").glob("v1*-*.json") if not p.name.endswith(".http.json"))


def post(srv: Server, path: str, body: bytes | dict[str, Any], **kw: Any) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    with srv.client() as c:
        return c.post(path, content=data, headers={"Content-Type": "application/json"}, **kw)


@pytest.mark.parametrize("name", RECORDED)
@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_every_recorded_review_gets_a_well_formed_answer(server: Server, name: str, endpoint: str) -> None:
    review = load_fixture(f"admission/{name}")
    r = post(server, f"{endpoint}?timeout=10s", review)
    assert r.status_code == 200
    body = r.json()
    assert body["apiVersion"] == review["apiVersion"]
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]
    assert isinstance(body["response"]["allowed"], bool)
    if "patch" in body["response"]:
        assert endpoint == "/mutate"
        assert body["response"]["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(body["response"]["patch"])), list)
    if not body["response"]["allowed"]:
        assert body["response"]["status"]["code"] >= 400


def test_v1beta1_answer_keeps_the_request_version(server: Server) -> None:
    review = load_fixture("admission/v1beta1-mutate-create-versionpair.json")
    body = post(server, "/mutate?timeout=10s", review).json()
    assert body["apiVersion"] == "admission.k8s.io/v1beta1"
    assert body["response"]["uid"] == review["request"]["uid"]


def test_recorded_http_request_is_accepted_as_sent(server: Server) -> None:
    """The exact path (with ?timeout=) and headers the apiserver sent."""
    http = load_fixture("admission/v1-mutate-create-deployment-pod.http.json")
    review = load_fixture("admission/v1-mutate-create-deployment-pod.json")
    headers = {k: v for k, v in http["headers"].items() if k.lower() not in ("host", "content-length")}
    with server.client() as c:
        r = c.post(http["path"], content=json.dumps(review).encode(), headers=headers)
    assert r.status_code == 200
    assert r.json()["response"]["uid"] == review["request"]["uid"]


def test_unhandled_resources_and_subresources_pass_unchanged(server: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-plain.json")
    review["request"]["resource"] = {"group": "", "version": "v1", "resource": "configmaps"}
    review["request"]["object"] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    body = post(server, "/mutate", review).json()["response"]
    assert body == {"uid": review["request"]["uid"], "allowed": True}
    review = load_fixture("admission/v1-mutate-create-plain.json")
    review["request"]["subResource"] = "status"
    body = post(server, "/mutate", review).json()["response"]
    assert body == {"uid": review["request"]["uid"], "allowed": True}


def test_dry_run_gets_the_same_answer(server: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-dryrun-koord-mid.json")
    wet = json.loads(json.dumps(review))
    wet["request"]["dryRun"] = False
    a = post(server, "/mutate", review).json()["response"]
    b = post(server, "/mutate", wet).json()["response"]
    assert a == b


def test_unknown_priority_class_is_denied_with_upstream_text(server: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-plain.json")
    review["request"]["object"]["spec"]["priorityClassName"] = "no-such-class"
    review["request"]["object"]["spec"].pop("priority", None)
    resp = post(server, "/mutate", review).json()["response"]
    assert resp["allowed"] is False
    assert resp["status"] == {"code": 403, "reason": "Forbidden",
                              "message": 'pods "pod-plain" is forbidden: no PriorityClass with name no-such-class '
                                         "was found"}
    assert resp["uid"] == review["request"]["uid"]


def test_patch_is_base64_jsonpatch_only_when_something_changed(server: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-plain.json")
    spec = review["request"]["object"]["spec"]
    spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
    resp = post(server, "/mutate", review).json()["response"]
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert {"op": "add", "path": "/spec/priority", "value": 0} in ops
    assert {"op": "add", "path": "/spec/preemptionPolicy", "value": "PreemptLowerPriority"} in ops
    assert resp["patchType"] == "JSONPatch"
    untouched = post(server, "/mutate", load_fixture("admission/v1-mutate-create-plain.json")).json()["response"]
    assert "patch" not in untouched and "patchType" not in untouched


BAD_BODIES = [
    ("not json", b"{nope", 400, "not JSON"),
    ("empty", b"", 400, "empty"),
    ("array", b"[1, 2]", 400, "JSON object"),
    ("wrong kind", b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "a"}}', 400, "kind"),
    ("unknown version", b'{"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {"uid": "a"}}',
     400, "apiVersion"),
    ("no request", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', 400,
     "invalid AdmissionReview: request is missing"),
    ("kind only", b'{"kind": "AdmissionReview"}', 400, "invalid AdmissionReview: apiVersion, request are missing"),
    ("empty object", b'{}', 400, "invalid AdmissionReview: apiVersion, kind, request are missing"),
    ("null apiVersion", b'{"apiVersion": null, "kind": "AdmissionReview", "request": {"uid": "a"}}', 400,
     "invalid AdmissionReview: apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, got null"),
    ("request not an object", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": [1]}',
     400, "invalid AdmissionReview: request must be an object, got an array"),
    ("no uid", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}}',
     400, "invalid AdmissionReview: request.uid, request.kind, request.resource, request.userInfo are missing"),
    ("empty uid", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}',
     400, "invalid AdmissionReview: request.uid must be a non-empty string, got ''"),
    ("no operation", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "a"}}',
     400, "invalid AdmissionReview: request.kind, request.resource, request.operation, request.userInfo are missing"),
    ("bad operation", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                      b'"request": {"uid": "a", "operation": "EXPLODE"}}', 400, "request.operation"),
    ("object not a map", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                         b'"request": {"uid": "a", "operation": "CREATE", "object": [1]}}', 400,
     "invalid AdmissionReview: request.object must be an object or null, got an array"),
    ("uid a number", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 0}}', 400,
     "invalid AdmissionReview: request.uid must be a non-empty string, got 0"),
    ("name a number", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                      b'"request": {"uid": "a", "operation": "CREATE", "name": 5}}', 400,
     "invalid AdmissionReview: request.name must be a string, got 5"),
    ("kind a string", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                      b'"request": {"uid": "a", "operation": "CREATE", "kind": "Pod"}}', 400,
     "invalid AdmissionReview: request.kind must be an object, got 'Pod'"),
    ("resource group null", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                            b'"request": {"uid": "a", "operation": "CREATE", "resource": {"group": null}}}', 400,
     "invalid AdmissionReview: request.resource.group must be a string, got null"),
    ("dryRun null", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                    b'"request": {"uid": "a", "operation": "CREATE", "dryRun": null}}', 400,
     "invalid AdmissionReview: request.dryRun must be a boolean, got null"),
    ("operation a long text", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                              b'"request": {"uid": "a", "operation": "' + b"X" * 50 + b'"}}', 400,
     "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got a string of 50 characters"),
    ("userInfo a list", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
                        b'"request": {"uid": "a", "operation": "CREATE", "userInfo": []}}', 400,
     "invalid AdmissionReview: request.userInfo must be an object, got an array"),
]


@pytest.mark.parametrize("name,body,status,needle", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_input_gets_a_clear_400(server: Server, name: str, body: bytes, status: int, needle: str) -> None:
    for endpoint in ("/mutate", "/validate"):
        r = post(server, endpoint, body)
        assert r.status_code == status
        err = r.json()
        assert needle in err["error"]
        assert "got None" not in err["error"]
        assert "Traceback" not in r.text


def test_oversized_body_gets_413(server: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-plain.json")
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (3 * 1024 * 1024)}
    r = post(server, "/mutate", review)
    assert r.status_code == 413
    assert "3145728 byte limit" in r.json()["error"]


def test_unknown_route_and_method_are_json_errors(server: Server) -> None:
    with server.client() as c:
        assert c.get("/nope").status_code == 404
        r = c.get("/mutate")
        assert r.status_code == 405
        assert "error" in r.json()


def test_healthz_and_metrics(server: Server) -> None:
    post(server, "/mutate", load_fixture("admission/v1-mutate-create-plain.json"))
    post(server, "/mutate", b"{nope")
    with server.client() as c:
        assert c.get("/healthz").text == "ok"
    text = server.metrics()
    assert 'colocation_webhook_requests_total{endpoint="mutate",operation="CREATE",outcome="allowed"} 1.0' in text
    assert 'colocation_webhook_requests_total{endpoint="mutate",operation="unknown",outcome="bad_request"} 1.0' in text
    assert 'colocation_webhook_request_duration_seconds_bucket{endpoint="mutate",le="0.001"}' in text
    assert 'colocation_webhook_cache_synced{kind="PriorityClass"} 1.0' in text
    assert 'colocation_webhook_cache_objects{kind="PriorityClass"} 4.0' in text


def test_metrics_carry_controller_runtime_names_and_patch_ops_by_rule(server: Server) -> None:
    """controller-runtime's webhook metrics (webhook = the path, code = the HTTP status, client_golang's buckets),
    the process and Python collectors, build_info, and patch operations counted by the rule that wrote them."""
    review = load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json")
    answer = post(server, "/mutate", review).json()["response"]
    ops = json.loads(base64.b64decode(answer["patch"]))
    post(server, "/validate", b"{nope")
    text = server.metrics()
    assert 'controller_runtime_webhook_requests_total{code="200",webhook="/mutate"} 1.0' in text
    assert 'controller_runtime_webhook_requests_total{code="400",webhook="/validate"} 1.0' in text
    assert 'controller_runtime_webhook_requests_total{code="500",webhook="/validate"} 0.0' in text
    assert 'controller_runtime_webhook_latency_seconds_bucket{le="0.005",webhook="/mutate"}' in text
    assert 'controller_runtime_webhook_latency_seconds_bucket{le="10.0",webhook="/mutate"}' in text
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/mutate"} 0.0' in text
    assert f'colocation_webhook_build_info{{version="{__version__}"}} 1.0' in text
    assert "process_resident_memory_bytes " in text and "python_info{" in text and "python_gc_objects_collected_total{" in text
    by_rule = {m[0]: float(m[1]) for m in re.findall(r'colocation_webhook_patch_operations_total\{rule="([^"]+)"\} (\S+)', text)}
    assert set(by_rule) <= {"colocation-profile", "priority", "batch-resources"} and "batch-resources" in by_rule
    assert sum(by_rule.values()) == len(ops)


def test_readyz_follows_the_first_sync(cert_dir: Path) -> None:
    state = ClusterState(WEBHOOK_KINDS)
    with run_server(state, cert_dir) as srv, srv.client() as c:
        r = c.get("/readyz")
        assert r.status_code == 503
        assert "not synced" in r.text and "PriorityClass" in r.text
        for kind in WEBHOOK_KINDS:
            state.replace(kind, [])
            state.mark_synced(kind)
        assert c.get("/readyz").status_code == 200


def test_tls_is_required_and_verified(server: Server) -> None:
    plain = server.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(plain + "/healthz", timeout=3)
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/healthz", verify=ssl.create_default_context(), timeout=3)
    assert server.server.config.ssl is not None
    assert server.server.config.ssl.minimum_version == ssl.TLSVersion.TLSv1_2
