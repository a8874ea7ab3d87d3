"""Ratcheting (issue 27 §1): on UPDATE a validating rule refuses only what the update brings.

A pod admitted before the webhook (or while it was down under failurePolicy Ignore) may carry what the rules refuse
today; every update of it that leaves that as it was (labels, annotations, a finalizer removed from a terminating pod,
status) is allowed, with one warning line per rule. A violation the update brings is refused with the CREATE text;
Koordinator's forbidden transitions (QoS class, priority class, sub-priority) are refused always. Through the real
validating chain, over HTTPS with a recorded UPDATE review, and through ``colocation-webhook review --old``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.conftest import load_fixture
from tests.serving import Server, run_server
from tests.validating_helpers import BATCH_CPU, BATCH_MEMORY, batch, container, pod, request, state, validate
from webhook.admission import chain
from webhook.admission.context import shorten_warning
from webhook.admission.domain.batch_mixing import MIXING_ADVICE
from webhook.admission.response import WARNING_LIMIT
from webhook.cli.webhook import main

ROOT = Path(__file__).resolve().parents[3]
Pod = dict[str, Any]
QOS, SUB, PC = "koordinator.sh/qosClass", "koordinator.sh/priority", "koordinator.sh/priority-class"
VALIDATING_ON_UPDATE = ["batch-mixing", "batch-units", "koordinator-rules"]
CARRIED = "already so before this update, allowed"


def be(*containers: dict[str, Any], klass: str | None = "koord-batch", priority: int | None = 5000,
       labels: dict[str, str] | None = None) -> Pod:
    """A pod with the given containers, QoS BE and (by default) koord-batch."""
    return pod(labels={QOS: "BE"} if labels is None else labels, priority=priority, priority_class=klass,
               containers=list(containers))


def both(name: str, res: dict[str, Any]) -> dict[str, Any]:
    """A container whose limits equal its requests."""
    return container(name, dict(res), dict(res))


def lsr(cpu: str) -> Pod:
    return be(both("app", {"cpu": cpu, "memory": "1Gi"}), klass="koord-prod", priority=9000, labels={QOS: "LSR"})


# Pods the webhook would refuse on CREATE, as a cluster may hold them: (name, the rules each breaks, the pod).
# Each breaks only the rules named, so a denial names its rule.
VIOLATIONS: list[tuple[str, list[str], Pod]] = [
    ("batch and native mixed", ["batch-mixing"], be(both("app", {BATCH_CPU: "1k", "memory": "1Gi"}))),
    ("both protocols' names", ["batch-mixing"],
     be(both("app", {"alibabacloud.com/reclaimed-cpu": "1000", BATCH_MEMORY: "1Gi"}))),
    ("fractional batch-cpu", ["batch-units"], batch(cpu="0.5")),
    ("batch request above limit", ["batch-units"], be(container("app", {BATCH_CPU: "2k"}, {BATCH_CPU: "1k"}))),
    ("batch without BE", ["koordinator-rules"], be(both("app", {BATCH_CPU: "1k"}), labels={})),
    ("BE without priority class", ["koordinator-rules"], be(both("app", {BATCH_CPU: "1k"}), klass=None,
                                                            priority=None)),
    ("BE as koord-prod", ["koordinator-rules"], be(both("app", {BATCH_CPU: "1k"}), klass="koord-prod",
                                                   priority=9000)),
    ("LSR with a fractional cpu", ["koordinator-rules"], lsr("1500m")),
    ("every rule at once", VALIDATING_ON_UPDATE, be(both("app", {BATCH_CPU: "0.5", "cpu": "1"}), labels={})),
]


def _meta(p: Pod, **fields: Any) -> Pod:
    out = copy.deepcopy(p)
    out["metadata"].update(fields)
    return out


def _labelled(p: Pod, key: str, value: str | None) -> Pod:
    out = copy.deepcopy(p)
    labels = out["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    return out


def _spec(p: Pod, **fields: Any) -> Pod:
    out = copy.deepcopy(p)
    out["spec"].update(fields)
    return out


def _image(p: Pod) -> Pod:
    out = copy.deepcopy(p)
    out["spec"]["containers"][0]["image"] = "busybox:1.37"
    return out


TERMINATING = {"deletionTimestamp": "2026-11-27T03:00:00Z", "deletionGracePeriodSeconds": 30}

# Updates that leave what the rules read as it was: (name, old pod -> (oldObject, object)).
INNOCENT: list[tuple[str, Callable[[Pod], tuple[Pod, Pod]]]] = [
    ("nothing changed", lambda p: (p, copy.deepcopy(p))),
    ("a label the rules do not read added", lambda p: (p, _labelled(p, "team", "a"))),
    ("that label changed", lambda p: (_labelled(p, "team", "a"), _labelled(p, "team", "b"))),
    ("an annotation added", lambda p: (p, _meta(p, annotations={"note": "x"}))),
    ("ownerReferences removed", lambda p: (_meta(p, ownerReferences=[{
        "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1"}]), p)),
    ("deletionTimestamp set", lambda p: (p, _meta(p, **TERMINATING))),
    ("finalizer removed from a terminating pod",
     lambda p: (_meta(p, finalizers=["example.com/cleanup"], **TERMINATING), _meta(p, finalizers=[], **TERMINATING))),
    ("status changed", lambda p: (p, p | {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}})),
    ("image changed", lambda p: (p, _image(p))),
    ("activeDeadlineSeconds set", lambda p: (p, _spec(p, activeDeadlineSeconds=60))),
]


def test_every_violating_pod_is_refused_on_create_by_its_rule() -> None:
    """The table's premise: each pod breaks its rules (the first of them answers a CREATE)."""
    for name, rules, p in VIOLATIONS:
        d = validate(p)
        assert (d.allowed, d.code, d.rule) == (False, 403, rules[0]), name


@pytest.mark.parametrize(("update", "change"), INNOCENT, ids=[u[0] for u in INNOCENT])
@pytest.mark.parametrize(("name", "rules", "violating"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_an_update_that_leaves_a_violation_as_it_was_is_allowed(name: str, rules: list[str], violating: Pod,
                                                                update: str, change: Callable[[Pod], tuple[Pod, Pod]]
                                                                ) -> None:
    old, new = change(violating)
    explain: list[str] = []
    d = validate(new, "UPDATE", old=old, explain=explain)
    assert d.allowed, d.message
    # One warning line per rule the pod already broke, cut to the apiserver's length; the same in the audit log.
    assert [w.split(":", 1)[0] for w in d.warnings] == rules
    assert all(w.startswith(f"{rule}: {CARRIED}") and len(w) < WARNING_LIMIT
               for rule, w in zip(rules, d.warnings, strict=True))
    assert sorted(d.audit_annotations) == sorted(rules)
    for rule in rules:
        assert any(line.startswith(f"[{rule}] allowed on UPDATE, the old object already carried it") for line in explain)


def _create_text(p: Pod) -> tuple[bool, int, str, str]:
    d = validate(p)
    return d.allowed, d.code, d.rule, d.message


# Updates that bring a violation (as a plain UPDATE could change resources under 1.27-1.31's alpha in-place
# resize, or a client posting to the webhook): denied with the text a CREATE of the new pod gets.
CLEAN_BATCH = batch(cpu="1k")
INTRODUCED: list[tuple[str, Pod, Pod]] = [
    ("a mix", CLEAN_BATCH, VIOLATIONS[0][2]),
    ("both protocols' names", CLEAN_BATCH, VIOLATIONS[1][2]),
    ("a fractional batch-cpu", CLEAN_BATCH, VIOLATIONS[2][2]),
    ("a request above its limit", CLEAN_BATCH, VIOLATIONS[3][2]),
    ("batch resources without BE", be(container("app"), labels={}), VIOLATIONS[4][2]),
    ("a fractional cpu on an LSR pod", lsr("2"), lsr("1500m")),
    ("a carried value changed (0.5 -> 0.7)", batch(cpu="0.5"), batch(cpu="0.7")),
    ("every rule at once, the first answers", be(container("app"), labels={}), VIOLATIONS[-1][2]),
]


@pytest.mark.parametrize(("name", "old", "new"), INTRODUCED, ids=[c[0] for c in INTRODUCED])
def test_a_violation_the_update_brings_is_denied_as_on_create(name: str, old: Pod, new: Pod) -> None:
    d = validate(new, "UPDATE", old=old)
    assert (d.allowed, d.code, d.rule, d.message) == _create_text(new)
    assert d.allowed is False


def _units(index: int, kind: str, value: str) -> str:
    return (f'spec.containers[{index}].resources.{kind}[{BATCH_CPU}]: Invalid value: "{value}": {BATCH_CPU} counts '
            "milli-cores and must be a whole number: write 500 for half a core, 1k or 1000 for one core")


def test_only_what_the_update_brings_is_named() -> None:
    """Container a carried a fractional batch-cpu; the update gives container b one: b alone is refused."""
    old = be(both("a", {BATCH_CPU: "0.5"}), both("b", {BATCH_CPU: "500"}))
    new = be(both("a", {BATCH_CPU: "0.5"}), both("b", {BATCH_CPU: "0.7"}))
    d = validate(new, "UPDATE", old=old)
    assert (d.allowed, d.rule) == (False, "batch-units")
    assert d.message == f'[{_units(1, "requests", "0.7")}, {_units(1, "limits", "0.7")}]'
    assert d.warnings == [] and d.audit_annotations == {}  # nothing is allowed of this rule's findings
    assert _units(0, "requests", "0.5") in _create_text(new)[3]


def test_a_rule_the_pod_already_broke_does_not_excuse_another() -> None:
    """A mix carried, a fractional batch-cpu brought: batch-mixing allows, batch-units refuses."""
    old = be(both("app", {BATCH_CPU: "1k", "memory": "1Gi"}))
    new = be(both("app", {BATCH_CPU: "0.5", "memory": "1Gi"}))
    d = validate(new, "UPDATE", old=old)
    assert (d.allowed, d.rule) == (False, "batch-units")
    assert d.message == f'[{_units(0, "requests", "0.5")}, {_units(0, "limits", "0.5")}]'
    assert [w.split(":", 1)[0] for w in d.warnings] == ["batch-mixing"]


def _immutable(field: str, value: str) -> str:
    return f'{field}: Invalid value: "{value}": field is immutable'


NEED_BE = "labels.koordinator.sh/qosClass: Required value: must specify koordinator QoS BE with koordinator colocation resources"
BY_NAME = {name: p for name, _, p in VIOLATIONS}
# Koordinator's forbidden transitions on pods that already broke a rule: refused always, and only they are named.
IMMUTABLE: list[tuple[str, Pod, Pod, str]] = [
    ("sub-priority changed on a BE koord-prod pod", _labelled(BY_NAME["BE as koord-prod"], SUB, "1000"),
     _labelled(BY_NAME["BE as koord-prod"], SUB, "2000"), _immutable(f"labels.{SUB}", "2000")),
    ("QoS class set on a batch pod without BE", BY_NAME["batch without BE"],
     _labelled(BY_NAME["batch without BE"], QOS, "LS"), _immutable(f"labels.{QOS}", "LS")),
    ("QoS class removed from a fractional batch pod", BY_NAME["fractional batch-cpu"],
     _labelled(BY_NAME["fractional batch-cpu"], QOS, None), f'[{_immutable(f"labels.{QOS}", "")}, {NEED_BE}]'),
    ("priority class changed by label on a BE pod without a class", BY_NAME["BE without priority class"],
     _labelled(BY_NAME["BE without priority class"], PC, "koord-batch"), _immutable("spec.priority", "koord-batch")),
    ("priority moved out of its band on an LSR pod (the carried fractional cpu not named)",
     BY_NAME["LSR with a fractional cpu"], _spec(BY_NAME["LSR with a fractional cpu"], priority=7000),
     f'[{_immutable("spec.priority", "koord-mid")}, '
     "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-mid cannot be used in combination]"),
]


@pytest.mark.parametrize(("name", "old", "new", "message"), IMMUTABLE, ids=[c[0] for c in IMMUTABLE])
def test_koordinators_forbidden_transitions_stay_refused(name: str, old: Pod, new: Pod, message: str) -> None:
    d = validate(new, "UPDATE", old=old)
    assert (d.allowed, d.code, d.rule, d.message) == (False, 403, "koordinator-rules", message)


def _non_quantity(p: Pod) -> Pod:
    out = copy.deepcopy(p)
    out["spec"]["containers"][0]["resources"]["requests"]["memory"] = "lots"
    return out


# The 400s stay: the apiserver could never have stored such an object, so no old object excuses it.
BAD_REQUESTS: list[tuple[str, Pod, Pod, str]] = [
    ("a non-quantity the old object held too", _non_quantity(CLEAN_BATCH), _non_quantity(CLEAN_BATCH),
     'spec.containers[0].resources.requests[memory]: Invalid value: "lots": quantities must match the regular '
     "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ("a malformed old object", {"metadata": {}, "spec": None}, BY_NAME["fractional batch-cpu"],
     "oldObject.spec: Required value: a pod needs a spec"),
]


@pytest.mark.parametrize(("name", "old", "new", "message"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_stay(name: str, old: Pod, new: Pod, message: str) -> None:
    d = validate(new, "UPDATE", old=old)
    assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 400, "BadRequest", "batch-mixing", message)


def test_explain_says_why_and_keeps_the_rules_own_line_for_a_clean_pod() -> None:
    old = BY_NAME["fractional batch-cpu"]
    explain: list[str] = []
    assert validate(_labelled(old, "team", "a"), "UPDATE", old=old, explain=explain).allowed
    units = [line for line in explain if line.startswith("[batch-units]")]
    assert units == [f"[batch-units] allowed on UPDATE, the old object already carried it (the update does not add "
                     f'it): [{_units(0, "requests", "0.5")}, {_units(0, "limits", "0.5")}]']
    clean: list[str] = []
    assert validate(_labelled(CLEAN_BATCH, "team", "a"), "UPDATE", old=CLEAN_BATCH, explain=clean).allowed
    assert "[batch-units] batch-cpu/batch-memory: whole milli-cores and bytes, requests not above limits" in clean


# -- what else an UPDATE reaches ------------------------------------------------------------------------------
def _webhook_rules(kind: str) -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "manifests" / "base" / "webhook-configurations.yaml").read_text())
    config = next(d for d in docs if d["kind"] == kind)
    return [rule for hook in config["webhooks"] for rule in hook["rules"]]


def test_pods_resize_is_sent_to_the_validating_webhook_and_judged_as_an_update() -> None:
    """In-place resize (pods/resize, GA in 1.35) is a subresource: the validating configuration registers it beside
    ``pods``, the mutating one does not (nothing is converted on a resize), and a review of one is judged as an
    UPDATE, ratcheting included. Koordinator registers bare ``pods`` and never sees one (issue 41)."""
    assert [r["resources"] for r in _webhook_rules("MutatingWebhookConfiguration")] == [["pods"]]
    assert [r["resources"] for r in _webhook_rules("ValidatingWebhookConfiguration")] == [["pods", "pods/resize"]]
    old, new = lsr("2"), lsr("1500m")
    explain: list[str] = []
    d = chain.validate(request(new, "UPDATE", old, sub="resize"), state(), chain.Settings(), explain)
    assert (d.allowed, d.rule) == (False, "koordinator-rules")
    assert "the requested CPUs of LSR Pod must be integer" in d.message
    assert d.message == chain.validate(request(new, "UPDATE", old), state(), chain.Settings()).message
    carried = chain.validate(request(lsr("1500m"), "UPDATE", lsr("1500m"), sub="resize"), state(), chain.Settings())
    assert carried.allowed and carried.warnings


def test_no_mutating_rule_handles_update() -> None:
    """So no mutating rule needs a ratchet: an UPDATE of a violating pod passes the mutating chain unchanged."""
    assert _webhook_rules("MutatingWebhookConfiguration")[0]["operations"] == ["CREATE"]
    old = VIOLATIONS[-1][2]
    req = request(_meta(old, finalizers=[], **TERMINATING), "UPDATE", _meta(old, finalizers=["x"], **TERMINATING))
    assert [r.NAME for r in chain.MUTATING if r.handles(req)] == []
    assert [r.NAME for r in chain.VALIDATING if r.handles(req)] == VALIDATING_ON_UPDATE
    d = chain.mutate(req, state(), chain.Settings())
    assert (d.allowed, d.patch, d.warnings) == (True, [], [])


# -- over HTTPS, with a recorded UPDATE review ----------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(cert_dir: Path) -> Iterator[Server]:
    with run_server(state(), cert_dir) as server:
        yield server


def _post(srv: Server, body: dict[str, Any]) -> dict[str, Any]:
    with srv.client() as c:
        r = c.post("/validate", content=orjson.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["response"]
    return out


def _fractional(p: Pod) -> Pod:
    """The recorded pod's worker with a fractional batch-cpu next to its cpu: a mix, a unit error, no BE label."""
    out = copy.deepcopy(p)
    for kind in ("requests", "limits"):
        out["spec"]["containers"][0]["resources"][kind][BATCH_CPU] = "0.5"
    return out


def test_recorded_label_update_of_a_violating_pod_over_https(srv: Server) -> None:
    review = load_fixture("admission/v1-validate-update-label.json")  # kubectl label: adds x=y
    req = review["request"]
    req["object"], req["oldObject"] = _fractional(req["object"]), _fractional(req["oldObject"])
    resp = _post(srv, review)
    assert resp["allowed"] is True, resp.get("status")
    assert [w.split(":", 1)[0] for w in resp["warnings"]] == VALIDATING_ON_UPDATE
    assert resp["warnings"][0] == shorten_warning(
        f'batch-mixing: {CARRIED}: container "worker" asks for both {BATCH_CPU} and cpu: {MIXING_ADVICE}')
    assert sorted(resp["auditAnnotations"]) == VALIDATING_ON_UPDATE


def test_recorded_update_that_brings_a_violation_over_https(srv: Server) -> None:
    review = load_fixture("admission/v1-validate-update-label.json")
    req = review["request"]
    req["object"] = _fractional(req["object"])
    denied = _post(srv, review)
    create = copy.deepcopy(review)
    create["request"].update(operation="CREATE", oldObject=None)
    assert denied["allowed"] is False
    assert denied["status"] == _post(srv, create)["status"]
    assert denied["status"]["message"].startswith('container "worker" asks for both kubernetes.io/batch-cpu and cpu')


# -- colocation-webhook review FILE --operation UPDATE --old FILE ------------------------------------------------
def test_review_cli_update_of_a_violating_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _meta(BY_NAME["fractional batch-cpu"], finalizers=["example.com/cleanup"], **TERMINATING)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(_meta(old, finalizers=[])))
    code = main(["review", str(tmp_path / "new.yaml"), "--operation", "UPDATE", "--old", str(tmp_path / "old.yaml"),
                 "--explain", "--output", "patch"])
    err = capsys.readouterr().err
    assert code == 0, err
    warning = f"batch-units: {CARRIED} (+1 more): {_units(0, 'requests', '0.5')}"  # review prints it whole
    assert f"Warning: {warning}\n" in err
    assert "[batch-units] allowed on UPDATE, the old object already carried it" in err

    (tmp_path / "old.yaml").write_text(yaml.safe_dump(CLEAN_BATCH))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(BY_NAME["fractional batch-cpu"]))
    code = main(["review", str(tmp_path / "new.yaml"), "--operation", "UPDATE", "--old", str(tmp_path / "old.yaml"),
                 "--output", "patch"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"denied by batch-units: [{_units(0, 'requests', '0.5')}, {_units(0, 'limits', '0.5')}]" in err
