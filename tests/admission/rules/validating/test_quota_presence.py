"""Table tests: PriorityClass quota presence (``CheckRequest`` in the apiserver's
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``) and the quota pieces."""

from __future__ import annotations

from typing import Any

import pytest

from tests.validating_helpers import container, pod, state, validate
from webhook.admission.domain.quota import pod_matches_scope, pod_usage
from webhook.admission.domain.quota_presence import (
    check_presence,
    format_scopes,
    limited_resource_names,
    uncovered_scopes,
)


def scope(name: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"scopeName": name, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def quota(name: str, ns: str = "prod-apps", hard: dict[str, Any] | None = None, exprs: list[Any] | None = None,
          scopes: list[Any] | None = None, status: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"hard": hard if hard is not None else {"pods": "10"}}
    if exprs is not None:
        spec["scopeSelector"] = {"matchExpressions": exprs}
    if scopes is not None:
        spec["scopes"] = scopes
    out = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": ns}, "spec": spec}
    if status:
        out["status"] = {"hard": dict(spec["hard"]), "used": {k: "0" for k in spec["hard"]}}
    return out


def prod_pod(klass: str | None = "high", **kw: Any) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi"}
    return pod(ns="prod-apps", priority_class=klass, containers=[container("app", res, dict(res))], **kw)


# -- scope matching: label-selector semantics on {PriorityClass: name} --------------------------------

MATCH = [
    ("In matches", "high", scope("PriorityClass", "In", "high", "mid"), True),
    ("In misses", "low", scope("PriorityClass", "In", "high"), False),
    ("In never matches empty", None, scope("PriorityClass", "In", "high"), False),
    ("NotIn matches other", "low", scope("PriorityClass", "NotIn", "high"), True),
    ("NotIn misses listed", "high", scope("PriorityClass", "NotIn", "high"), False),
    ("NotIn matches empty name", None, scope("PriorityClass", "NotIn", "high"), True),
    ("Exists with name", "low", scope("PriorityClass", "Exists"), True),
    ("Exists without name", None, scope("PriorityClass", "Exists"), False),
    ("DoesNotExist without name", None, scope("PriorityClass", "DoesNotExist"), True),
    ("DoesNotExist with name", "x", scope("PriorityClass", "DoesNotExist"), False),
    ("empty string is no name", "", scope("PriorityClass", "Exists"), False),
    ("BestEffort on burstable", "x", scope("BestEffort", "Exists"), False),
    ("NotBestEffort on burstable", "x", scope("NotBestEffort", "Exists"), True),
    ("NotTerminating", "x", scope("NotTerminating", "Exists"), True),
    ("PVC scope never matches a pod", "x", scope("VolumeAttributesClass", "Exists"), False),
]


@pytest.mark.parametrize(("name", "klass", "req", "want"), MATCH, ids=[c[0] for c in MATCH])
def test_pod_matches_scope(name: str, klass: str | None, req: dict[str, Any], want: bool) -> None:
    assert pod_matches_scope(prod_pod(klass), req) is want


def test_other_pod_scopes() -> None:
    be = pod(containers=[container("a")])
    assert pod_matches_scope(be, scope("BestEffort", "Exists"))
    assert pod_matches_scope(pod(activeDeadlineSeconds=10), scope("Terminating", "Exists"))
    aff = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "k", "namespaceSelector": {}}}]}}
    assert pod_matches_scope(pod(affinity=aff), scope("CrossNamespacePodAffinity", "Exists"))
    assert not pod_matches_scope(pod(), scope("CrossNamespacePodAffinity", "Exists"))


@pytest.mark.parametrize(("reqs", "text"), [
    ([scope("PriorityClass", "In", "high")], "[{PriorityClass In [high]}]"),
    ([scope("BestEffort", "Exists"), scope("PriorityClass", "In", "a", "b")],
     "[{BestEffort Exists []} {PriorityClass In [a b]}]"),
    ([], "[]"),
])
def test_format_scopes_is_go_v(reqs: list[Any], text: str) -> None:
    assert format_scopes(reqs) == text


def test_same_scope_name_covers_whatever_operator() -> None:
    limited = [scope("PriorityClass", "In", "x")]
    assert uncovered_scopes(limited, [scope("PriorityClass", "Exists")]) == []
    assert uncovered_scopes(limited, [scope("BestEffort", "Exists")]) == limited


# -- pod usage names (PodUsageFunc, pkg/quota/v1/evaluator/core/pods.go) ------------------------------------------

def test_pod_usage_names() -> None:
    p = pod(containers=[container("a", {"cpu": "1", "memory": "1Gi", "example.com/gpu": "1",
                                        "hugepages-2Mi": "4Mi", "kubernetes.io/batch-cpu": "500"},
                                  {"cpu": "2", "ephemeral-storage": "1Gi"})])
    assert set(pod_usage(p)) == {
        "count/pods", "pods", "cpu", "requests.cpu", "limits.cpu", "memory", "requests.memory",
        "ephemeral-storage", "requests.ephemeral-storage", "limits.ephemeral-storage",
        "hugepages-2Mi", "requests.hugepages-2Mi", "requests.example.com/gpu"}
    done = pod(containers=[container("a", {"cpu": "1"})], )
    done["status"] = {"phase": "Succeeded"}
    assert set(pod_usage(done)) == {"count/pods"}


def test_limited_names_need_positive_usage() -> None:
    usage = pod_usage(pod(containers=[container("a", {"cpu": "0", "memory": "1Gi"})]))
    assert limited_resource_names(usage, [{"resource": "pods", "matchContains": ["cpu", "memory"]}]) == [
        n for n in usage if n in ("memory", "requests.memory")]


# -- the presence check, table-driven (name, pod, quotas, limitedResources, expected error) ---------

HIGH = [{"resource": "pods", "matchScopes": [scope("PriorityClass", "In", "high")]}]
PRESENCE = [
    ("no limited scope for this class", prod_pod("low"), [], HIGH, None),
    ("no quota at all", prod_pod("high"), [], HIGH, "insufficient quota to match these scopes: [{PriorityClass In [high]}]"),
    ("covering quota", prod_pod("high"), [quota("q", exprs=[scope("PriorityClass", "In", "high")])], HIGH, None),
    ("Exists quota covers In", prod_pod("high"), [quota("q", exprs=[scope("PriorityClass", "Exists")])], HIGH, None),
    ("quota for another class", prod_pod("high"), [quota("q", exprs=[scope("PriorityClass", "In", "low")])], HIGH,
     "insufficient quota to match these scopes: [{PriorityClass In [high]}]"),
    ("unscoped quota does not cover", prod_pod("high"), [quota("q")], HIGH,
     "insufficient quota to match these scopes: [{PriorityClass In [high]}]"),
    ("quota with empty hard still covers", prod_pod("high"),
     [quota("q", hard={}, exprs=[scope("PriorityClass", "In", "high")])], HIGH, None),
    ("quota scopes field is not a PriorityClass scope", prod_pod("high"), [quota("q", scopes=["NotBestEffort"])], HIGH,
     "insufficient quota to match these scopes: [{PriorityClass In [high]}]"),
    ("BestEffort limited, covered by spec.scopes", pod(ns="prod-apps", containers=[container("a")]),
     [quota("q", scopes=["BestEffort"])], [{"resource": "pods", "matchScopes": [scope("BestEffort", "Exists")]}], None),
    ("two limited scopes, both listed", prod_pod("high"), [],
     [{"resource": "pods", "matchScopes": [scope("PriorityClass", "In", "high"), scope("NotBestEffort", "Exists")]}],
     "insufficient quota to match these scopes: [{PriorityClass In [high]} {NotBestEffort Exists []}]"),
    ("NotIn limited matches a pod without class", prod_pod(None), [],
     [{"resource": "pods", "matchScopes": [scope("PriorityClass", "NotIn", "a", "b")]}],
     "insufficient quota to match these scopes: [{PriorityClass NotIn [a b]}]"),
    ("entries for other resources still limit scopes", prod_pod("high"), [],
     [{"resource": "persistentvolumeclaims", "matchScopes": [scope("PriorityClass", "In", "high")]}],
     "insufficient quota to match these scopes: [{PriorityClass In [high]}]"),
    ("matchContains without quota", prod_pod("high"), [],
     [{"resource": "pods", "matchContains": ["cpu"]}], "insufficient quota to consume: cpu,limits.cpu,requests.cpu"),
    ("matchContains covered by tracking quota", prod_pod("high"),
     [quota("q", hard={"cpu": "4", "requests.cpu": "4", "limits.cpu": "8"})],
     [{"resource": "pods", "matchContains": ["cpu"]}], None),
    ("matchContains partly covered: names are literal", prod_pod("high"),
     [quota("q", hard={"requests.cpu": "4"})], [{"resource": "pods", "matchContains": ["cpu"]}],
     "insufficient quota to consume: cpu,limits.cpu"),
    ("matchContains requests.cpu covered", prod_pod("high"),
     [quota("q", hard={"requests.cpu": "4"})], [{"resource": "pods", "matchContains": ["requests.cpu"]}], None),
    ("matchContains for another resource is ignored", prod_pod("high"), [],
     [{"resource": "services", "matchContains": ["cpu"]}], None),
    ("tracking quota must match the pod's scopes", prod_pod("high"),
     [quota("q", hard={"cpu": "4", "limits.cpu": "8"}, exprs=[scope("PriorityClass", "In", "low")])],
     [{"resource": "pods", "matchContains": ["cpu"]}], "insufficient quota to consume: cpu,limits.cpu,requests.cpu"),
    ("consume is checked before scopes", prod_pod("high"), [],
     [{"resource": "pods", "matchContains": ["memory"], "matchScopes": [scope("PriorityClass", "In", "high")]}],
     "insufficient quota to consume: limits.memory,memory,requests.memory"),
    ("hand-written quota without status falls back to spec.hard", prod_pod("high"),
     [quota("q", hard={"cpu": "4", "requests.cpu": "4", "limits.cpu": "8"}, status=False)],
     [{"resource": "pods", "matchContains": ["cpu"]}], None),
    ("batch-cpu is native: never charged",
     pod(ns="prod-apps", labels={"koordinator.sh/qosClass": "BE"}, priority=5000,
         containers=[container("a", {"kubernetes.io/batch-cpu": "1k"})]),
     [], [{"resource": "pods", "matchContains": ["batch"]}], None),
]


@pytest.mark.parametrize(("name", "obj", "quotas", "limited", "error"), PRESENCE, ids=[c[0] for c in PRESENCE])
def test_check_presence(name: str, obj: dict[str, Any], quotas: list[Any], limited: list[Any], error: str | None) -> None:
    assert check_presence(obj, limited, quotas).error == error


@pytest.mark.parametrize(("name", "obj", "quotas", "limited", "error"), PRESENCE, ids=[c[0] for c in PRESENCE])
def test_quota_presence_rule(name: str, obj: dict[str, Any], quotas: list[Any], limited: list[Any], error: str | None) -> None:
    # The same table through the chain: only quotas in the pod's namespace count.
    elsewhere = [{**q, "metadata": {**q["metadata"], "namespace": "other"}} for q in quotas]
    explain: list[str] = []
    d = validate(obj, cluster=state(*quotas), limited=limited, explain=explain)
    if error is None:
        assert d.allowed, d.message
    else:
        assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 403, "Forbidden", "quota-presence", error)
        assert explain[-1] == f"[quota-presence] denied: {error}"
    if quotas and error is None and any(q["spec"].get("scopeSelector") for q in quotas):
        assert not validate(obj, cluster=state(*elsewhere), limited=limited).allowed


def test_rule_is_create_only_and_explains() -> None:
    obj = prod_pod("high")
    assert validate(obj, "UPDATE", old=obj, limited=HIGH).allowed
    explain: list[str] = []
    assert validate(obj, limited=[], explain=explain).allowed
    assert "[quota-presence] no limitedResources configured (--quota-config): nothing to check" in explain


def test_covered_leaves_audit_annotation() -> None:
    d = validate(prod_pod("high"), cluster=state(quota("koord-prod-quota", exprs=[scope("PriorityClass", "In", "high")])),
                 limited=HIGH)
    assert d.allowed and d.audit_annotations["quota-presence"] == "covered in prod-apps by koord-prod-quota"
