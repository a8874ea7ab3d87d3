"""A rule that raises must not block the cluster: fail-open by default (allowed, a warning naming the rule, one log
line with the review's uid, outcome "error"), fail-closed with --on-rule-error deny."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.conftest import load_fixture
from tests.serving import run_server
from webhook.admission.context import Settings
from webhook.admission.rules.mutating import batch_resources
from webhook.admission.rules.validating import quota_presence
from webhook.cluster.state import ClusterState

MUTATE = "admission/v1-mutate-create-koord-batch-init-containers.json"
VALIDATE = "admission/v1-validate-create-koord-batch-init-containers.json"


def _explode(ctx: object) -> None:
    raise ZeroDivisionError("division by zero")


@pytest.fixture()
def crashing_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: one mutating and one validating rule that raise (the chain reads ``admit``/``validate``
    from the rule module at each review)."""
    monkeypatch.setattr(batch_resources, "admit", _explode)
    monkeypatch.setattr(quota_presence, "validate", _explode)


@pytest.mark.usefixtures("crashing_rules")
@pytest.mark.parametrize(("endpoint", "fixture", "rule"), [("/mutate", MUTATE, "batch-resources"),
                                                           ("/validate", VALIDATE, "quota-presence")])
def test_a_crash_is_allowed_with_a_warning_and_counted_as_error(example_state: ClusterState, cert_dir: Path,
                                                                caplog: pytest.LogCaptureFixture, endpoint: str,
                                                                fixture: str, rule: str) -> None:
    review = load_fixture(fixture)
    uid = review["request"]["uid"]
    caplog.set_level(logging.INFO)
    with run_server(example_state, cert_dir) as srv, srv.client() as c:
        r = c.post(endpoint, content=json.dumps(review))
        metrics = srv.metrics()
    assert r.status_code == 200
    response = r.json()["response"]
    assert response["allowed"] is True and "status" not in response
    assert "patch" not in response  # as if this webhook had not been called
    assert any(f"rule {rule} failed (ZeroDivisionError)" in w and len(w) <= 120 for w in response["warnings"])
    lines = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(lines) == 1 and rec_text(lines[0]).count("\n") == 0
    assert uid in lines[0].getMessage() and rule in lines[0].getMessage()
    assert lines[0].exc_info is None  # one line; the traceback only at debug level
    name = endpoint.strip("/")
    assert f'colocation_webhook_requests_total{{endpoint="{name}",operation="CREATE",outcome="error"}} 1.0' in metrics
    assert f'colocation_webhook_rule_errors_total{{rule="{rule}"}} 1.0' in metrics
    assert "colocation_webhook_denials_total{" not in metrics


def rec_text(record: logging.LogRecord) -> str:
    return logging.Formatter("%(message)s").format(record)


@pytest.mark.usefixtures("crashing_rules")
def test_on_rule_error_deny_is_fail_closed(example_state: ClusterState, cert_dir: Path) -> None:
    with run_server(example_state, cert_dir, Settings(on_rule_error="deny")) as srv, srv.client() as c:
        r = c.post("/mutate", content=json.dumps(load_fixture(MUTATE)))
        metrics = srv.metrics()
    response = r.json()["response"]
    assert response["allowed"] is False
    assert response["status"] == {"code": 500, "reason": "InternalError",
                                  "message": "internal error in rule batch-resources: ZeroDivisionError"}
    assert 'outcome="error"} 1.0' in metrics and "colocation_webhook_denials_total{" not in metrics
