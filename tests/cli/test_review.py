"""`colocation-webhook review --quota-config ... --explain`: the validating rules offline."""

from __future__ import annotations

from pathlib import Path

import pytest

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
