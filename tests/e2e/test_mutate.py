"""End to end: recorded AdmissionReviews over HTTPS to /mutate with cluster state from a folder of YAML,
the returned base64 JSONPatch applied with ``jsonpatch``; and ``colocation-webhook review``."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import KOORD_PRIORITY_CLASSES_YAML, load_fixture
from tests.serving import Server, run_server
from webhook.cli.webhook import main
from webhook.cluster.files import FilesSource
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.core.priority import resolve_priority

STATE_YAML = KOORD_PRIORITY_CLASSES_YAML + """---
apiVersion: v1
kind: Namespace
metadata: {name: colo-demo, labels: {koordinator.sh/enable-colocation: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: webhook-test}
---
apiVersion: v1
kind: Namespace
metadata: {name: broken}
---
apiVersion: config.koordinator.sh/v1alpha1
kind: ClusterColocationProfile
metadata: {name: colocation-profile-example}
spec:
  namespaceSelector: {matchLabels: {koordinator.sh/enable-colocation: "true"}}
  selector: {matchLabels: {koordinator.sh/enable-colocation: "true"}}
  qosClass: BE
  priorityClassName: koord-batch
  koordinatorPriority: 1000
  schedulerName: koord-scheduler
  labels: {koordinator.sh/mutated: "true"}
---
apiVersion: config.koordinator.sh/v1alpha1
kind: ClusterColocationProfile
metadata: {name: gold}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: broken}}
  priorityClassName: koord-gold
"""


@pytest.fixture()
def state_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "state.yaml").write_text(STATE_YAML)
    return folder


@pytest.fixture()
def srv(state_dir: Path, cert_dir: Path) -> Iterator[Server]:
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(state_dir, state).load()
    with run_server(state, cert_dir) as s:
        yield s


def _post(srv: Server, review: dict[str, Any]) -> dict[str, Any]:
    with srv.client() as c:
        r = c.post("/mutate", json=review)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["apiVersion"] == review["apiVersion"] and body["response"]["uid"] == review["request"]["uid"]
    response: dict[str, Any] = body["response"]
    return response


def _patched(review: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = review["request"]["object"]
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    return patched


def test_recorded_reviews_over_https(srv: Server) -> None:
    # koord-batch pod, no profile matches: cpu/memory converted in containers and init containers
    review = load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json")
    resp = _post(srv, review)
    out = _patched(review, resp)
    assert out["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "536870912"}
    assert all("cpu" not in c["resources"]["limits"] for c in out["spec"]["initContainers"])
    assert "batch-resources" in resp["auditAnnotations"]

    # Deployment pod (generateName only): the example profile applies, then the conversion
    review = load_fixture("admission/v1-mutate-create-deployment-pod.json")
    resp = _post(srv, review)
    out = _patched(review, resp)
    assert out["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert (out["spec"]["priorityClassName"], out["spec"]["priority"], out["spec"]["preemptionPolicy"]) == \
        ("koord-batch", 5000, "PreemptLowerPriority")
    assert "kubernetes.io/batch-cpu" in out["spec"]["containers"][0]["resources"]["limits"]
    assert any("colocation-profile-example" in w for w in resp["warnings"])
    # reinvocation: the in-tree Priority plugin accepts it, and we answer with no patch
    assert resolve_priority(out["spec"], lambda n: {"koord-batch": {"value": 5000}}.get(n), None).error is None
    again = copy.deepcopy(review)
    again["request"]["object"] = out
    assert "patch" not in _post(srv, again)

    # BE pod with batch resources and priority 0: no conversion, the annotation as Koordinator writes it
    review = load_fixture("admission/v1-mutate-create-be-batch-resources.json")
    out = _patched(review, _post(srv, review))
    assert json.loads(out["metadata"]["annotations"]["node.koordinator.sh/extended-resource-spec"]) == {
        "containers": {c["name"]: {"limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
                                   "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}}
                       for c in review["request"]["object"]["spec"]["containers"]}}

    # koord-mid pod: mid resources; v1beta1 answered in v1beta1
    review = load_fixture("admission/v1beta1-mutate-create-versionpair.json")
    out = _patched(review, _post(srv, review))
    res = out["spec"]["containers"][0]["resources"]
    assert not any(k in ("cpu", "memory") for kind in res.values() for k in kind)
    assert any(k.startswith("kubernetes.io/mid-") for kind in res.values() for k in kind)

    # UPDATE: allowed unchanged
    resp = _post(srv, load_fixture("admission/v1-mutate-update-label.json"))
    assert resp["allowed"] is True and "patch" not in resp


def test_denial_over_https(srv: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json")
    review["request"]["namespace"] = review["request"]["object"]["metadata"]["namespace"] = "broken"
    resp = _post(srv, review)
    assert resp["allowed"] is False
    assert resp["status"] == {"code": 403, "reason": "Forbidden",
                              "message": 'pods "batch-init" is forbidden: no PriorityClass with name koord-gold was found'}


def test_unknown_namespace_warns_over_https(srv: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-deployment-pod.json")
    review["request"]["namespace"] = review["request"]["object"]["metadata"]["namespace"] = "elsewhere"
    resp = _post(srv, review)
    assert resp["allowed"] is True and "patch" not in resp
    assert resp["warnings"] == ["namespace elsewhere is not in the webhook's cluster state; no colocation profile applied"]


# -- colocation-webhook review ---------------------------------------------------------------------------
def _pod_file(tmp_path: Path, fixture: str, **changes: str) -> Path:
    obj = load_fixture(f"admission/{fixture}")["request"]["object"]
    for k, v in changes.items():
        obj["metadata"][k] = v
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(obj))
    return path


def test_review_explain_shows_profiles_rules_and_patch(tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod_file(tmp_path, "v1-mutate-create-deployment-pod.json")
    code = main(["review", str(pod), "--cluster-state", str(state_dir), "--explain", "--output", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    err = captured.err
    assert "[colocation-profile] profile colocation-profile-example: MATCH: namespaceSelector " \
           "koordinator.sh/enable-colocation=true matches colo-demo" in err
    assert "[colocation-profile] profile gold: no match: namespaceSelector kubernetes.io/metadata.name=broken " \
           "does not match namespace colo-demo labels" in err
    assert "probability draw" in err
    assert "[priority] already resolved: koord-batch = 5000" in err
    assert '[batch-resources] container "nginx": converted requests.cpu' in err
    assert "patch: [" in err
    assert json.loads(captured.out)["spec"]["priorityClassName"] == "koord-batch"


def test_review_explain_shows_selector_and_probability_misses(tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (state_dir / "more.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
         "metadata": {"name": "never"}, "spec": {"probability": 0}}]))
    pod = _pod_file(tmp_path, "v1-mutate-create-koord-batch-init-containers.json")
    # no profile matches; converted to batch resources, so labelled BE, which Koordinator's rule needs
    assert main(["review", str(pod), "--cluster-state", str(state_dir), "--explain"]) == 0
    err = capsys.readouterr().err
    assert "[batch-resources] the pod states no QoS class: koordinator.sh/qosClass=BE, the class of koord-batch" in err
    assert "[koordinator-rules] qosClass=BE, priorityClass=koord-batch: allowed" in err
    assert "profile colocation-profile-example: no match: selector koordinator.sh/enable-colocation=true " \
           "does not match pod labels {app=batch-init}" in err
    assert "profile never: no match:" in err and "probability 0%: draw" in err


def test_review_explain_says_an_invalid_profile_is_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    """A profile the webhook cannot apply reaches it only from a cluster (a files state refuses it at load,
    tests/core/test_validation.py): it is ignored, and --explain and a warning say why."""
    from tests.mutating import make_state, mutate, pod, profile

    state = make_state(profile("bad", selector={"matchExpressions": [{"key": "a", "operator": "Is"}]}))
    explain: list[str] = []
    decision, _ = mutate(pod("p", "colo-demo"), state, explain)
    assert any("profile bad: no match: ignored, the profile is invalid: selector.matchExpressions[0].operator" in line
               for line in explain), explain
    assert any(w.startswith("colocation profile bad ignored") for w in decision.warnings)


def test_review_output_patch_prints_empty_list_when_nothing_changes(tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "webhook-test"},
           "spec": {"containers": [{"name": "a", "image": "nginx"}], "priority": 0,
                    "preemptionPolicy": "PreemptLowerPriority"}}
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(pod))
    assert main(["review", str(path), "--cluster-state", str(state_dir), "--output", "patch"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_review_denial_exits_1(tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod_file(tmp_path, "v1-mutate-create-koord-batch-init-containers.json", namespace="broken")
    for output in ("yaml", "patch", "review"):
        assert main(["review", str(pod), "--cluster-state", str(state_dir), "--output", output]) == 1
        assert "no PriorityClass with name koord-gold was found" in capsys.readouterr().err


def test_recorded_batch_pod_with_an_invalid_cpu_is_denied_whole(srv: Server) -> None:
    review = load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json")
    review["request"]["object"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "abc"
    resp = _post(srv, review)
    assert resp["allowed"] is False and "patch" not in resp
    assert resp["status"] == {"code": 400, "reason": "BadRequest", "message":
                              'spec.containers[0].resources.requests[cpu]: Invalid value: "abc": quantities must '
                              "match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"}


def test_review_of_a_koord_batch_pod_without_qos_or_profile_is_admitted(tmp_path: Path, state_dir: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Seen behind a real kube-apiserver: such a pod was converted, then denied for want of QoS BE."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": "webhook-test"},
           "spec": {"priorityClassName": "koord-batch",
                    "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "0.5m"}}}]}}
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    assert main(["review", str(path), "--cluster-state", str(state_dir)]) == 0
    captured = capsys.readouterr()
    out = yaml.safe_load(captured.out)
    assert out["metadata"]["labels"] == {"koordinator.sh/qosClass": "BE"}
    assert out["spec"]["containers"][0]["resources"] == {"requests": {"kubernetes.io/batch-cpu": "1"}}
    assert 'requests.cpu "0.5m" is not whole milli-cores: batch-cpu 1 (rounded up)' in captured.err
    assert "did you mean" not in captured.err and "1k" not in captured.err
