"""What ``review`` left unsaid (issue 41): a workload file points at ``audit -f``; ``--old`` with an AdmissionReview,
which carries its own ``oldObject``, is refused rather than ignored; an empty ``--cluster-state`` folder is said
(an empty folder is readable: the rules see an empty cluster, docs/cluster-state.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from webhook.cli.webhook import main

ROOT = Path(__file__).resolve().parents[2]
POD = ROOT / "examples" / "pod-koord-batch.yaml"
REVIEW = ROOT / "examples" / "admissionreview-koord-batch.json"


def _deployment() -> dict[str, object]:
    pod = yaml.safe_load(POD.read_text())
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "colo-demo"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod["spec"]}}}


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_workload_is_pointed_at_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    path = tmp_path / f"deploy{suffix}"
    path.write_text(json.dumps(_deployment()) if suffix == ".json" else yaml.safe_dump(_deployment()))
    assert main(["review", str(path)]) == 2
    assert capsys.readouterr().err == (f"colocation-webhook: {path}: is a Deployment; review takes a Pod or "
                                       f"AdmissionReview: audit -f {path} checks a workload's pod template\n")


def test_another_kind_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["review", str(path)]) == 2
    assert capsys.readouterr().err == (f"colocation-webhook: {path}: is a ConfigMap; review takes a Pod or "
                                       "AdmissionReview\n")


def test_old_with_an_admission_review_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review", str(REVIEW), "--old", str(POD)]) == 2
    assert capsys.readouterr() == ("", f"colocation-webhook: --old {POD}: {REVIEW} is an AdmissionReview, which "
                                       "carries the pod before an update itself (request.oldObject); --old goes "
                                       "with a Pod file\n")


def test_an_empty_cluster_state_folder_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "state"
    empty.mkdir()
    main(["review", str(POD), "--cluster-state", str(empty), "-o", "patch"])
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if "holds no object" in line]
    assert said == [f"colocation-webhook: warning: --cluster-state {empty}: holds no object the cluster state "
                    "reads: the rules see an empty cluster (no PriorityClass, Namespace, quota or profile)"], err


def test_a_folder_with_objects_is_not_said_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: colo-demo}\n")
    main(["review", str(POD), "--cluster-state", str(state), "-o", "patch"])
    assert "holds no object" not in capsys.readouterr().err
