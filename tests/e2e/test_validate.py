"""End to end over HTTPS: /validate with cluster state from a folder of YAML and a --quota-config file."""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import KOORD_PRIORITY_CLASSES_YAML, load_fixture
from tests.serving import Server, run_server
from tests.validating_helpers import BATCH_CPU, BATCH_MEMORY, KOORD_PROD_CONFIG, container, pod
from webhook.admission import chain
from webhook.admission.quota_config import load_quota_config
from webhook.cluster.files import FilesSource
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

STATE_YAML = KOORD_PRIORITY_CLASSES_YAML + """---
apiVersion: v1
kind: Namespace
metadata: {name: prod-apps, labels: {team: prod}}
---
apiVersion: v1
kind: Namespace
metadata: {name: colo-demo}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: koord-prod-quota, namespace: prod-apps}
spec:
  hard: {pods: "20", requests.cpu: "16", requests.memory: 64Gi, limits.cpu: "32", limits.memory: 128Gi}
  scopeSelector:
    matchExpressions:
    - {scopeName: PriorityClass, operator: In, values: [koord-prod]}
"""

# The apiserver's AdmissionConfiguration form, with the Configuration inline.
QUOTA_CONFIG = ("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
                "- name: ResourceQuota\n  configuration:\n" + textwrap.indent(KOORD_PROD_CONFIG, "    "))


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, cert_dir: Path) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("e2e")
    objects = base / "cluster-state"  # what --cluster-state points at
    objects.mkdir()
    (objects / "cluster.yaml").write_text(STATE_YAML)
    (base / "admission.yaml").write_text(QUOTA_CONFIG)  # what --quota-config points at
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(objects, state).load()
    settings = chain.Settings(limited_resources=load_quota_config(base / "admission.yaml"))
    with run_server(state, cert_dir, settings) as server:
        yield server


def review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
           api_version: str = "admission.k8s.io/v1") -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": {
        "uid": "e2e-uid", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": meta.get("name", ""),
        "namespace": meta["namespace"], "operation": operation, "userInfo": {}, "object": obj, "oldObject": old}}


def post(srv: Server, body: dict[str, Any]) -> dict[str, Any]:
    with srv.client() as c:
        r = c.post("/validate", content=orjson.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["response"]["uid"] == body["request"]["uid"]
    assert "patch" not in out["response"]
    response: dict[str, Any] = out["response"]
    return response


def be_pod(cpu: str = "1k", priority: int = 5000, klass: str = "koord-batch", ns: str = "colo-demo",
           extra: dict[str, str] | None = None) -> dict[str, Any]:
    res = {BATCH_CPU: cpu, BATCH_MEMORY: "1Gi", **(extra or {})}
    return pod(ns=ns, labels={"koordinator.sh/qosClass": "BE"}, priority=priority, priority_class=klass,
               containers=[container("app", res, dict(res))])


def prod_pod(ns: str = "prod-apps", qos: str = "LS") -> dict[str, Any]:
    res = {"cpu": "2", "memory": "4Gi"}
    return pod(ns=ns, labels={"koordinator.sh/qosClass": qos}, priority=9000, priority_class="koord-prod",
               containers=[container("web", res, dict(res))])


WHOLE_CPU = ("kubernetes.io/batch-cpu counts milli-cores and must be a whole number: "
             "write 500 for half a core, 1k or 1000 for one core")

CASES = [
    ("batch pod", be_pod(), None),
    ("mixing", be_pod(extra={"cpu": "1"}),
     'container "app" asks for both kubernetes.io/batch-cpu and cpu: a pod uses either batch resources '
     "(kubernetes.io/batch-cpu, kubernetes.io/batch-memory) or native cpu and memory, not both"),
    ("half a core as 0.5", be_pod(cpu="0.5"),
     f'[spec.containers[0].resources.requests[kubernetes.io/batch-cpu]: Invalid value: "0.5": {WHOLE_CPU}, '
     f'spec.containers[0].resources.limits[kubernetes.io/batch-cpu]: Invalid value: "0.5": {WHOLE_CPU}]'),
    ("BE as koord-prod", be_pod(priority=9000, klass="koord-prod", ns="prod-apps"),
     "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"),
    ("koord-prod with quota", prod_pod(), None),
    ("koord-prod without quota", prod_pod(ns="colo-demo"),
     "insufficient quota to match these scopes: [{PriorityClass In [koord-prod]}]"),
    ("LSR with 1.5 cpus", pod(ns="prod-apps", labels={"koordinator.sh/qosClass": "LSR"}, priority=9000,
                              priority_class="koord-prod", containers=[container("w", {"cpu": "1.5"}, {"cpu": "1.5"})]),
     'pod.spec.containers[*].resources.requests: Invalid value: "1500m": the requested CPUs of LSR Pod must be integer'),
]


@pytest.mark.parametrize(("name", "obj", "message"), CASES, ids=[c[0] for c in CASES])
def test_validate_over_https(srv: Server, name: str, obj: dict[str, Any], message: str | None) -> None:
    resp = post(srv, review(obj))
    if message is None:
        assert resp["allowed"] is True and "status" not in resp
    else:
        assert resp["allowed"] is False
        assert resp["status"] == {"code": 403, "reason": "Forbidden", "message": message}


def test_small_batch_cpu_is_left_to_the_mutating_webhook(srv: Server) -> None:
    # "2" may be a conversion's output (cpu: 2m): only the mutating webhook sees what the user wrote.
    resp = post(srv, review(be_pod(cpu="2")))
    assert resp["allowed"] is True and "warnings" not in resp and "auditAnnotations" not in resp


def test_invalid_quantity_over_https(srv: Server) -> None:
    obj = be_pod()
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "abc"
    resp = post(srv, review(obj))
    assert resp["allowed"] is False
    assert resp["status"] == {"code": 400, "reason": "BadRequest", "message":
                              'spec.containers[0].resources.requests[cpu]: Invalid value: "abc": quantities must match '
                              "the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"}


def test_quota_presence_audit_annotation_over_https(srv: Server) -> None:
    resp = post(srv, review(prod_pod()))
    assert resp["auditAnnotations"] == {"quota-presence": "covered in prod-apps by koord-prod-quota"}


def test_update_immutable_over_https(srv: Server) -> None:
    old = be_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["koordinator.sh/qosClass"] = "LS"
    resp = post(srv, review(new, "UPDATE", old))
    assert resp["status"]["message"] == (
        '[labels.koordinator.sh/qosClass: Invalid value: "LS": field is immutable, labels.koordinator.sh/qosClass: '
        "Required value: must specify koordinator QoS BE with koordinator colocation resources]")


def test_update_of_uncovered_koord_prod_pod_is_allowed(srv: Server) -> None:
    # Quota presence is a CREATE rule, as upstream (pod UPDATEs are not quota-evaluated).
    old = prod_pod(ns="colo-demo")
    assert post(srv, review(old, "UPDATE", old))["allowed"] is True


def test_recorded_reviews_over_https(srv: Server) -> None:
    be = load_fixture("admission/v1-validate-create-be-batch-resources.json")
    resp = post(srv, be)
    assert resp["status"]["message"] == (
        "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass= cannot be used in combination")
    upd = load_fixture("admission/v1-validate-update-label.json")
    assert post(srv, upd)["allowed"] is True
    v1beta1 = load_fixture("admission/v1beta1-validate-create-versionpair.json")
    with srv.client() as c:
        out = c.post("/validate", content=orjson.dumps(v1beta1)).json()
    assert out["apiVersion"] == "admission.k8s.io/v1beta1" and out["response"]["allowed"] is True


def test_recorded_koord_prod_pod_in_quota_namespace(srv: Server) -> None:
    # The recorded mid pod, moved to koord-prod: denied in colo-demo (no quota); in prod-apps the quota on
    # limits.cpu/limits.memory refuses it until its container sets limits (as the apiserver's quota plugin would).
    body = load_fixture("admission/v1-validate-create-versionpair.json")
    obj = body["request"]["object"]
    obj["spec"].update(priorityClassName="koord-prod", priority=9000)
    resp = post(srv, body)
    assert resp["status"]["message"] == "insufficient quota to match these scopes: [{PriorityClass In [koord-prod]}]"
    obj["metadata"]["namespace"] = body["request"]["namespace"] = "prod-apps"
    name = obj["metadata"].get("name") or obj["metadata"]["generateName"]
    assert post(srv, body)["status"]["message"] == (f'pods "{name}" is forbidden: failed quota: koord-prod-quota: '
                                                    "must specify limits.cpu for: app; limits.memory for: app")
    obj["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "512Mi"}
    assert post(srv, body)["allowed"] is True
