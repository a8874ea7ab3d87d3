"""Strict pods (issue 41): a Pod file given to ``review``, and a pod or a workload's pod template given to
``audit -f``, is refused for a misspelt or repeated field as kube-apiserver 1.36's strict decoding refuses it for
``kubectl apply`` (``strict decoding error: unknown field "spec.containers[0].resource", unknown field
"spec.priorityClasName"``, the words it answered for the same file), naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli import webhook as cli

MISSPELT = """\
apiVersion: v1
kind: Pod
metadata:
  name: bad
  namespace: default
spec:
  priorityClasName: x
  containers:
  - name: app
    image: busybox
    resource:
      requets: {cpu: 1}
"""
PREFIX = 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_review_refuses_a_misspelt_pod_with_the_apiservers_words(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(MISSPELT)
    code, out, err = _run(capsys, "review", str(path))
    assert code == 2 and out == ""
    assert err.strip() == (f"colocation-webhook: {path}:7: {PREFIX}unknown field \"spec.priorityClasName\", "
                           'unknown field "spec.containers[0].resource"')


def test_review_refuses_a_repeated_field_yaml_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(MISSPELT.replace("    resource:\n      requets: {cpu: 1}\n", "    image: other\n")
                    .replace("  priorityClasName: x\n", ""))
    code, _, err = _run(capsys, "review", str(path))
    assert code == 2 and err.strip() == f'colocation-webhook: {path}:10: {PREFIX}duplicate field "spec.containers[0].image"'
    doc = tmp_path / "pod.json"
    doc.write_text('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": '
                   '[{"name": "app", "image": "a", "image": "b"}]}}')
    code, _, err = _run(capsys, "review", str(doc))
    assert code == 2 and 'duplicate field "spec.containers[0].image"' in err


def test_a_well_formed_pod_is_reviewed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "priorityClassName": "koord-prod", "containers": [{"name": "app", "image": "b",
                                                           "resources": {"requests": {"cpu": "1"}}}]}}))
    assert _run(capsys, "review", str(path))[0] == 0


def test_audit_says_a_workloads_misspelt_template_cannot_be_audited(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                                "spec": {"selector": {}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
                                    "containers": [{"name": "app", "image": "b", "requets": {}}]}}}}))
    code, out, _ = _run(capsys, "audit", "-f", str(path), "-o", "json")
    assert code == 1
    assert ('Deployment in version \\"v1\\" cannot be handled as a Deployment: strict decoding error: unknown field '
            '\\"spec.template.spec.containers[0].requets\\"') in out


def test_the_models_checked_against_know_the_newest_kubernetes_we_support() -> None:
    """The fields come from the pinned client's models (requirements.lock), not a copy: a client older than the
    newest Kubernetes the project supports (1.36) would refuse that release's fields. Pod-level resources (1.34) and
    a container's resize policy (in-place resize) are in them."""
    import kubernetes
    from kubernetes.client import V1Container, V1PodSpec

    assert int(kubernetes.__version__.split(".")[0]) >= 36       # client N follows Kubernetes 1.N
    assert "resources" in V1PodSpec.attribute_map.values() and "resizePolicy" in V1Container.attribute_map.values()
