"""The files source: manifests like `kubectl apply` takes them, errors with path and line, reload."""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.admission.context import Settings
from webhook.cluster.files import FilesSource, StateFileError, load_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.server.service import ReviewService, dry_run

PC = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: {name}}}
value: {value}
"""


def _state(folder: Path) -> tuple[ClusterState, FilesSource]:
    state = ClusterState(WEBHOOK_KINDS)
    src = FilesSource(folder, state)
    src.load()
    return state, src


def test_multi_document_yaml_json_and_lists(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(PC.format(name="a", value=1) + "---\n" + PC.format(name="b", value=2)
                                     + "---\n# only a comment\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ns.json").write_text(
        '{"apiVersion": "v1", "kind": "NamespaceList", "items": ['
        '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n1", "labels": {"team": "x"}}}]}')
    (tmp_path / "deploy.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ignored}\n")
    (tmp_path / "notes.txt").write_text("not a manifest")
    state, _ = _state(tmp_path)
    assert state.ready
    assert {p["metadata"]["name"] for p in state.objects("PriorityClass")} == {"a", "b"}
    assert state.namespace_labels("n1") == {"team": "x", "kubernetes.io/metadata.name": "n1"}
    assert state.namespace_labels("missing") is None


@pytest.mark.parametrize("text,needle", [
    ("kind: PriorityClass\nmetadata: {name: x\n", ":3: invalid YAML: did not find expected ',' or '}' "
     "(while parsing a flow mapping at line 2)"),
    ("kind: Other\nmetadata: {name: a}\n---\n- just\n- a list\n", ":4: a manifest must be an object"),
    ("metadata: {name: x}\n", ":1: manifest has no kind"),
    ("apiVersion: v1\nkind: Namespace\nmetadata: {}\n", ":1: Namespace has no metadata.name"),
])
def test_errors_name_the_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "f.yaml").write_text(text)
    with pytest.raises(StateFileError) as exc:
        load_folder(tmp_path)
    assert str(exc.value).startswith(str(tmp_path / "f.yaml"))
    assert needle in str(exc.value)


def test_broken_json_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text('{\n"kind": "Namespace",\n"metadata": {\n}}}')
    with pytest.raises(StateFileError, match=r"f\.json:4: invalid JSON"):
        load_folder(tmp_path)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match="does not exist"):
        load_folder(tmp_path / "nope")


def _wait(cond: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_reload_on_change_keeps_last_good_state_on_error(tmp_path: Path) -> None:
    f = tmp_path / "pcs.yaml"
    f.write_text(PC.format(name="a", value=1))
    state, src = _state(tmp_path)
    src.start()
    try:
        f.write_text(PC.format(name="a", value=1) + "---\n" + PC.format(name="b", value=2))
        assert _wait(lambda: state.priority_class("b") is not None)
        f.write_text("kind: PriorityClass\nmetadata: {name: broken\n")
        assert _wait(lambda: src.last_error is not None)
        assert "pcs.yaml:" in (src.last_error or "")
        assert state.priority_class("b") is not None and state.ready
        f.write_text(PC.format(name="c", value=3))
        assert _wait(lambda: state.priority_class("c") is not None)
        assert state.priority_class("b") is None and src.last_error is None
    finally:
        src.stop()


# -- what is not a cluster object: skipped, with one note; what can only be a mistake: refused ---------------------
ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def _notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "webhook.cluster.files" and r.levelname == "WARNING"]


@pytest.mark.parametrize(("folder", "skipped", "held"), [
    ("koordinator", "crd-clustercolocationprofiles.yaml (CustomResourceDefinition); kustomization.yaml (Component)",
     ("PriorityClass", "koord-batch")),
    ("examples", "quota-admission-config.yaml (AdmissionConfiguration)",
     ("ClusterColocationProfile", "colocation-profile-example")),
    ("", "components/monitoring/dashboards/colocation.json (no kind: not a Kubernetes object)",
     ("ResourceQuota", "koord-prod-quota")),
])
def test_the_repository_manifests_load_with_one_note(caplog: pytest.LogCaptureFixture, folder: str, skipped: str,
                                                     held: tuple[str, str]) -> None:
    caplog.set_level(logging.INFO, logger="webhook.cluster.files")
    state, src = _state(MANIFESTS / folder)
    assert state.ready and any(o["metadata"]["name"] == held[1] for o in state.objects(held[0]))
    notes = _notes(caplog)
    assert len(notes) == 1 and notes[0].startswith(f"cluster state from {MANIFESTS / folder}: skipped ")
    assert skipped in notes[0]
    src.reload()  # the same files: nothing new to say
    assert len(_notes(caplog)) == 1


def test_review_through_the_cli_takes_the_koordinator_folder() -> None:
    done = subprocess.run([sys.executable, "-m", "webhook.cli.webhook", "review", str(ROOT / "examples" /
                           "pod-koord-batch.yaml"), "--cluster-state", str(MANIFESTS / "koordinator"), "-o", "patch"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"cluster state from {MANIFESTS / 'koordinator'}: skipped 2 documents it does not read: "
        "crd-clustercolocationprofiles.yaml (CustomResourceDefinition); kustomization.yaml (Component)")
    assert "/spec/priority" in done.stdout or "batch-cpu" in done.stdout  # koord-batch read from the folder


# (name, document, what the note says of it): not one of the state's objects, so skipped and named
NOT_READ = [
    ("kustomize", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n",
     "Kustomization"),
    ("kustomize without a header", "resources: [a.yaml]\n", "no kind: not a Kubernetes object"),
    ("apiserver config", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins: []\n",
     "AdmissionConfiguration"),
    ("kubeconfig", "apiVersion: v1\nkind: Config\nclusters: []\n", "Config"),
    ("core kind not read", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "Service"),
    ("another group", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n", "Deployment"),
    ("the agent's kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n", "Pod"),
]


def test_what_is_no_object_of_the_state_is_named_in_one_note(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhook.cluster.files")
    for i, (_, text, _) in enumerate(NOT_READ):
        (tmp_path / f"{i}.yaml").write_text(text)
    (tmp_path / "pc.yaml").write_text(PC.format(name="a", value=1))
    state, _ = _state(tmp_path)
    assert [p["metadata"]["name"] for p in state.objects("PriorityClass")] == ["a"]
    assert _notes(caplog) == [f"cluster state from {tmp_path}: skipped {len(NOT_READ)} documents it does not read: "
                              + "; ".join(f"{i}.yaml ({what})" for i, (_, _, what) in enumerate(NOT_READ))]


# (name, document, the error after path:line): a kind the state reads, misspelt or at an apiVersion it is not
REFUSED = [
    ("a misspelt kind of a group read",
     "apiVersion: config.koordinator.sh/v1alpha1\nkind: ClusterColocationProfil\nmetadata: {name: c}\n",
     ':1: no matches for kind "ClusterColocationProfil" in version "config.koordinator.sh/v1alpha1"; '
     "did you mean ClusterColocationProfile?"),
    ("a misspelt core kind", "apiVersion: v1\nkind: Namespce\nmetadata: {name: n}\n",
     ':1: no matches for kind "Namespce" in version "v1"; did you mean Namespace?'),
    ("a read kind in the core group", "apiVersion: v1\nkind: PriorityClass\nmetadata: {name: p}\nvalue: 1\n",
     ':1: no matches for kind "PriorityClass" in version "v1"; the cluster state reads PriorityClass as '
     "scheduling.k8s.io/v1"),
    ("a read kind in another group",
     "apiVersion: koordinator.sh/v1alpha1\nkind: ClusterColocationProfile\nmetadata: {name: c}\n",
     ':1: no matches for kind "ClusterColocationProfile" in version "koordinator.sh/v1alpha1"; the cluster state '
     "reads ClusterColocationProfile as config.koordinator.sh/v1alpha1"),
    ("a near miss without apiVersion", "# a namespace\nkind: namespace\nmetadata: {name: n}\n",
     ':2: no matches for kind "namespace"; did you mean Namespace?'),
]


@pytest.mark.parametrize(("text", "needle"), [pytest.param(t, n, id=name) for name, t, n in REFUSED])
def test_a_mistake_about_a_kind_read_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "f.yaml").write_text(text)
    with pytest.raises(StateFileError) as exc:
        _state(tmp_path)
    assert str(exc.value) == f"{tmp_path / 'f.yaml'}{needle}"


def test_the_core_kinds_are_the_clients() -> None:
    import kubernetes.client

    from webhook.cluster.strict import CORE_KINDS

    assert [k for k in CORE_KINDS if k != "List" and not hasattr(kubernetes.client, f"V1{k}")
            and not hasattr(kubernetes.client, f"CoreV1{k}")] == []  # v1 Event: CoreV1Event


# -- trimmed as the live source trims: the same answers, less held ----------------------------------------------------
def _weighed(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as a cluster holds it: managedFields, kubectl's last-applied copy, status (a quota's used counts)."""
    meta = obj.setdefault("metadata", {})
    meta["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                              "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
    meta["uid"], meta["resourceVersion"] = "0000-1", "7"
    meta.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(obj)
    if obj["kind"] == "Namespace":
        obj["spec"], obj["status"] = {"finalizers": ["kubernetes"]}, {"phase": "Active"}
    if obj["kind"] == "ResourceQuota":
        obj["status"] = {"hard": obj["spec"]["hard"], "used": {k: "0" for k in obj["spec"]["hard"]}}
    return obj


RECORDED = sorted(p for p in (ROOT / "tests" / "fixtures" / "admission").glob("v1*-*.json")
                  if not p.name.endswith(".http.json"))


def test_trimmed_state_answers_the_recorded_reviews_as_the_whole_objects_do(tmp_path: Path) -> None:
    sources = [ROOT / "webhook" / "cluster" / "example" / "state.yaml", MANIFESTS / "examples" / "koord-prod-quota.yaml"]
    docs = [_weighed(d) for s in sources for d in yaml.safe_load_all(s.read_text()) if d]
    docs += [_weighed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns-{i}", "labels": {
        "team": "a", "koordinator.sh/enable-colocation": "true"}}}) for i in range(3)]
    (tmp_path / "state.yaml").write_text(yaml.safe_dump_all(docs))
    trimmed, _ = _state(tmp_path)
    whole = ClusterState(WEBHOOK_KINDS)  # the objects as parsed, every field: what the state held before
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in yaml.safe_load_all((tmp_path / "state.yaml").read_text()):
        by_kind.setdefault(d["kind"], []).append(d)
    whole.replace_all(by_kind)

    assert len(RECORDED) >= 20
    for path in RECORDED:
        review = json.loads(path.read_text())
        a = dry_run(ReviewService(trimmed, Settings()), copy.deepcopy(review))
        b = dry_run(ReviewService(whole, Settings()), copy.deepcopy(review))
        assert (a.mutating.status, a.mutating.body, a.validation, a.final, a.problem) == (
            b.mutating.status, b.mutating.body, b.validation, b.final, b.problem), path.name

    # ... from less: what nothing reads is gone, and repeated strings and a quota's hard list are held once
    for kind in WEBHOOK_KINDS:
        for obj in trimmed.objects(kind):
            assert not {"managedFields", "uid", "resourceVersion"} & set(obj["metadata"]), obj
            assert "kubectl.kubernetes.io/last-applied-configuration" not in obj["metadata"].get("annotations", {})
    assert "spec" not in trimmed.objects("Namespace")[0]
    quota = trimmed.get("ResourceQuota", "koord-prod-quota", "prod-apps")
    assert quota is not None and quota["status"]["hard"] is quota["spec"]["hard"] and "used" not in quota["status"]
    first, _, third = (trimmed.get("Namespace", f"ns-{i}") for i in range(3))
    assert first is not None and third is not None
    assert first["metadata"]["labels"]["team"] is third["metadata"]["labels"]["team"]
