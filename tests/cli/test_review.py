"""`colocation-webhook review --quota-config ... --explain`: the validating rules offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.validating_helpers import KOORD_PROD_CONFIG
from webhook.cli.webhook import main

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: colo-demo}
spec:
  priorityClassName: koord-prod
  containers:
  - {name: web, image: nginx, resources: {requests: {cpu: "1"}}}
"""
CONFIG = KOORD_PROD_CONFIG


def test_review_denies_uncovered_class_and_explains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "q.yaml").write_text(CONFIG)
    code = main(["review", str(tmp_path / "pod.yaml"), "--quota-config", str(tmp_path / "q.yaml"), "--explain",
                 "--output", "patch"])
    err = capsys.readouterr().err
    assert code == 1
    assert "[koordinator-rules] qosClass=<none>, priorityClass=koord-prod: allowed" in err
    assert "[quota-presence] priorityClassName koord-prod: limited scopes [{PriorityClass In [koord-prod]}]" in err
    assert ("denied by quota-presence: insufficient quota to match these scopes: [{PriorityClass In [koord-prod]}]"
            in err)


def test_review_without_quota_config_allows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    assert main(["review", str(tmp_path / "pod.yaml"), "--output", "patch"]) == 0


def test_bad_quota_config_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "q.yaml").write_text(CONFIG.replace("operator: In", "operator: Exists"))
    code = main(["review", str(tmp_path / "pod.yaml"), "--quota-config", str(tmp_path / "q.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--quota-config: " in err and "must be no value when `operator` is 'Exist'" in err


def test_a_pod_with_anchors_reviews_as_written_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Anchors for repeated labels and resources, as kustomize-style manifests have them (issue 41: the reader
    that bounds aliases reads them as before)."""
    anchored = tmp_path / "anchored.yaml"
    anchored.write_text(
        "apiVersion: v1\nkind: Pod\n"
        "metadata: {name: web, namespace: colo-demo, labels: {app: &app web}, annotations: {app: *app}}\n"
        "spec:\n  priorityClassName: koord-prod\n  containers:\n"
        "  - &c {name: web, image: nginx, resources: {requests: {cpu: \"1\"}}}\n  - {<<: *c, name: side}\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(json.loads(json.dumps(yaml.safe_load(anchored.read_text())))))  # unshared
    answers = []
    for path in (anchored, plain):
        code = main(["review", str(path), "--output", "patch"])
        answers.append((code, *capsys.readouterr()))
    assert answers[0] == answers[1] and answers[0][0] in (0, 1) and answers[0][1], answers[0]


def test_a_profile_no_rule_can_apply_is_named_and_the_rest_of_the_state_serves(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """An exported cluster holding a profile the apiserver stores but no rule can apply reviews as the webhook
    serving that cluster answers (docs/cluster-state.md, "A profile no rule can apply"), not a refused state."""
    from webhook.cluster.sources import example_folder

    state = tmp_path / "state"
    state.mkdir()
    (state / "state.yaml").write_text((example_folder() / "state.yaml").read_text())
    (state / "empty-in.yaml").write_text(
        "apiVersion: config.koordinator.sh/v1alpha1\nkind: ClusterColocationProfile\nmetadata: {name: colo-empty}\n"
        "spec:\n  selector:\n    matchExpressions: [{key: tier, operator: In, values: []}]\n  qosClass: BE\n")
    pod = Path(__file__).resolve().parents[2] / "examples" / "pod-koord-batch.yaml"
    assert main(["review", "--cluster-state", str(state), str(pod)]) == 0
    out, err = capsys.readouterr()
    why = "selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{state / 'empty-in.yaml'}:6: ClusterColocationProfile colo-empty: {why}; not applied until it is fixed"]
    assert err.splitlines()[0] == f"Warning: colocation profile colo-empty ignored: {why}"
    assert "koordinator.sh/qosClass: BE" in out   # the example's own profile applied
