"""``audit`` never passes on nothing: an input with no pod or workload (an empty file, a Service, the empty stdin of
a failed ``kubectl kustomize | audit -f -``) says so and exits 3, and kustomize's own files (a kustomization, its
patches) are skipped, each named, instead of audited as objects that exist nowhere."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from webhook.cli.webhook import COMMAND_CODES, main

ROOT = Path(__file__).resolve().parents[2]
POD = str(ROOT / "examples" / "pod-koord-batch.yaml")
EXAMPLE_NOTE = "audit: cluster state: embedded example state"


def audit(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    code = main(["audit", *args])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if not line.startswith(EXAMPLE_NOTE)]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


SERVICE = """\
    apiVersion: v1
    kind: Service
    metadata: {name: web}
    spec: {ports: [{port: 80}]}
    """


@pytest.mark.parametrize(("name", "text", "args", "said"), [
    ("an empty file", "", [], "nothing to audit: the input holds no object"),
    ("a Service", SERVICE, [], "nothing to audit: the input holds 1 object(s), none a pod or workload (Service)"),
    ("two ConfigMaps in a List", """\
        apiVersion: v1
        kind: List
        items:
        - {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
        - {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
        """, [], "nothing to audit: the input holds 2 object(s), none a pod or workload (ConfigMap x2)"),
    ("a pod left out by -n", Path(POD).read_text(), ["-n", "elsewhere"],
     "nothing to audit: the input holds 1 object(s); 1 pod(s) or workload(s) left out by -n, -l or --kinds"),
    ("a pod left out by --kinds", Path(POD).read_text(), ["--kinds", "deploy"],
     "nothing to audit: the input holds 1 object(s); 1 pod(s) or workload(s) left out by -n, -l or --kinds"),
])
def test_nothing_to_audit_is_said_and_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                              text: str, args: list[str], said: str) -> None:
    path = write(tmp_path, "input.yaml", text)
    for output in ("table", "json", "summary"):
        code, out, err = audit(["-f", str(path), "-o", output, *args], capsys)
        assert (code, out, err) == (3, "", [f"audit: {said}"]), output


def test_an_empty_stdin_is_nothing_to_audit(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``kubectl kustomize DIR | audit -f -`` where kustomize failed: the pipe brings nothing."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    code, out, err = audit(["-f", "-"], capsys)
    assert (code, out, err) == (3, "", ["audit: nothing to audit: the input holds no object (an empty stdin: did "
                                        "the command before the pipe fail?)"])


def test_migrate_with_nothing_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "svc.yaml", SERVICE)
    code, out, err = audit(["-f", str(path), "--migrate"], capsys)
    assert (code, out, err) == (3, "", ["audit --migrate: nothing to audit: the input holds 1 object(s), none a pod "
                                        "or workload (Service)"])


def test_exit_3_is_documented() -> None:
    assert 3 in COMMAND_CODES["audit"]
    readme = (ROOT / "README.md").read_text()
    assert "| 3 | `audit`: nothing to audit" in readme
    assert "| 3 | nothing to audit" in (ROOT / "docs" / "audit.md").read_text()


DEPLOYMENT = """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: default}
    spec:
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers: [{name: c, image: nginx}]
    """


def kustomize_tree(root: Path) -> None:
    write(root, "base/deploy.yaml", DEPLOYMENT)
    write(root, "base/kustomization.yaml", "resources: [deploy.yaml]\n")
    write(root, "overlay/kustomization.yaml", """\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [../base]
        patches:
        - path: replicas.yaml
        - path: ops.yaml
          target: {kind: Deployment, name: web}
        - patch: |-
            - op: replace
              path: /spec/replicas
              value: 2
        configMapGenerator:
        - name: settings
          files: [settings.yaml]
        """)
    # a strategic merge patch: a Deployment to look at, and one that exists nowhere
    write(root, "overlay/replicas.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
                                         "spec: {replicas: 3}\n")
    write(root, "overlay/ops.yaml", "- {op: replace, path: /spec/replicas, value: 2}\n")  # no object at all
    write(root, "overlay/settings.yaml", "level: debug\n")


def test_a_kustomize_folder_audits_its_objects_and_names_what_it_skips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kustomize_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = audit(["-f", ".", "-o", "json", "--all"], capsys)
    assert code == 0
    assert [line.split('"name":')[1].split(",")[0] for line in out.splitlines()] == ['"web"']  # the base's alone
    assert err == [
        "audit: skipped 5 kustomize file(s), which are no objects: base/kustomization.yaml (a kustomization); "
        "overlay/kustomization.yaml (a kustomization); overlay/ops.yaml (a patch of overlay/kustomization.yaml); "
        "overlay/replicas.yaml (a patch of overlay/kustomization.yaml); overlay/settings.yaml (an input of a "
        "generator of overlay/kustomization.yaml); to audit what kustomize builds: kubectl kustomize DIR | "
        "colocation-webhook audit -f -",
        "audit: audited 1 object(s): 1 agree"]


def test_a_patch_given_alone_is_named_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    kustomize_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = audit(["-f", "overlay/replicas.yaml", "-f", "overlay/kustomization.yaml"], capsys)
    assert (code, out, err) == (3, "", [
        "audit: skipped 2 kustomize file(s), which are no objects: overlay/replicas.yaml (a patch of "
        "overlay/kustomization.yaml); overlay/kustomization.yaml (a kustomization); to audit what kustomize builds: "
        "kubectl kustomize DIR | colocation-webhook audit -f -",
        "audit: nothing to audit: the input holds no object"])


def test_a_kustomization_under_another_name_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "component.yaml", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n")
    code, _, err = audit(["-f", str(path), "-f", POD], capsys)
    assert code == 1  # the pod is audited (the example profile changes it)
    assert err[0] == (f"audit: skipped 1 kustomize file(s), which are no objects: {path} (a Component); to audit "
                      "what kustomize builds: kubectl kustomize DIR | colocation-webhook audit -f -")


ANCHORED_LIST = """\
    apiVersion: v1
    kind: List
    items:
    - apiVersion: v1
      kind: Pod
      metadata: {name: a, namespace: default, labels: &labels {app: web, tier: front}}
      spec:
        containers:
        - &container {name: c, image: nginx, resources: {requests: {cpu: 500m, memory: 256Mi}}}
    - apiVersion: v1
      kind: Pod
      metadata: {name: b, namespace: default, labels: *labels}
      spec:
        containers:
        - <<: *container
          name: d
    """


def test_a_list_with_anchors_across_its_items_audits_as_written_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The items are composed one at a time and aliases of an earlier item still read (issue 41: the reader that
    bounds aliases)."""
    anchored = write(tmp_path, "anchored.yaml", ANCHORED_LIST)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(json.loads(json.dumps(yaml.safe_load(anchored.read_text())))))  # unshared
    assert "&" not in plain.read_text()
    for output in ("json", "summary"):
        first = audit(["-f", str(anchored), "-o", output], capsys)
        assert first == audit(["-f", str(plain), "-o", output], capsys), output
        assert first[0] in (0, 1) and "2 object(s)" in str(first), first
