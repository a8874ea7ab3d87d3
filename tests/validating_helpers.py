"""Small builders shared by the validating-rule tests."""

from __future__ import annotations

import copy
from typing import Any

from msgspec.structs import replace

from webhook.admission import chain
from webhook.admission.review import AdmissionRequest, request_from_dict
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"

# A bare ResourceQuota Configuration limiting koord-prod pods to namespaces with a covering quota.
KOORD_PROD_CONFIG = """\
apiVersion: resourcequota.admission.k8s.io/v1beta1
kind: Configuration
limitedResources:
- resource: pods
  matchScopes:
  - {scopeName: PriorityClass, operator: In, values: [koord-prod]}
"""


def pod(name: str = "p", ns: str = "colo-demo", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, containers: list[dict[str, Any]] | None = None,
        init: list[dict[str, Any]] | None = None, overhead: dict[str, str] | None = None,
        priority: int | None = None, priority_class: str | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    body: dict[str, Any] = {"containers": containers if containers is not None else [container("app")]}
    if init is not None:
        body["initContainers"] = init
    if overhead is not None:
        body["overhead"] = overhead
    if priority is not None:
        body["priority"] = priority
    if priority_class is not None:
        body["priorityClassName"] = priority_class
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def container(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res}


def batch(cpu: Any = "500", memory: Any = "1Gi") -> dict[str, Any]:
    """A BE pod asking for batch resources, requests equal to limits."""
    res = {BATCH_CPU: cpu, BATCH_MEMORY: memory}
    return pod(labels={"koordinator.sh/qosClass": "BE"}, priority=5000, priority_class="koord-batch",
               containers=[container("app", dict(res), dict(res))])


def request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
            sub: str = "") -> AdmissionRequest:
    given = obj.get("metadata")
    meta: dict[str, Any] = given if isinstance(given, dict) else {}
    envelope = request_from_dict({
        "uid": "0000-test", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": sub,
        "name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "operation": operation,
        "userInfo": {},
    })
    # The pods as given, past the envelope's schema (which refuses, say, metadata that is no object): the
    # rules must cope with whatever object reaches them.
    return replace(envelope, object=obj, oldObject=old)


def state(*objects: dict[str, Any]) -> ClusterState:
    s = ClusterState(WEBHOOK_KINDS)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    s.replace_all(by_kind)
    return s


def validate(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
             cluster: ClusterState | None = None, limited: list[dict[str, Any]] | None = None,
             explain: list[str] | None = None, sub: str = "") -> Any:
    return chain.validate(request(obj, operation, old, sub), cluster or state(),
                          chain.Settings(limited_resources=limited or []), explain)


def resized(obj: dict[str, Any], **requests: str) -> dict[str, Any]:
    """``obj`` with its first container's requests and limits changed as a ``pods/resize`` changes them."""
    out = copy.deepcopy(obj)
    res = out["spec"]["containers"][0].setdefault("resources", {})
    for kind in ("requests", "limits"):
        if kind in res or kind == "requests":
            res.setdefault(kind, {}).update(requests)
    return out


def with_labels(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("labels", {}).update(labels)
    return out


def expect(decision: Any, rule: str, message: str | None) -> None:
    """None: allowed; else a 403 Forbidden denial by ``rule`` with exactly ``message``."""
    if message is None:
        assert decision.allowed, decision.message
    else:
        got = (decision.allowed, decision.code, decision.reason, decision.rule, decision.message)
        assert got == (False, 403, "Forbidden", rule, message)


BE = {"koordinator.sh/qosClass": "BE"}


def be_pod(containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None,
           overhead: dict[str, str] | None = None) -> dict[str, Any]:
    """A koord-batch BE pod with these containers."""
    return pod(labels=BE, priority=5000, priority_class="koord-batch", containers=containers, init=init,
               overhead=overhead)


def one_container(cpu: Any = None, mem: Any = None, lcpu: Any = None, lmem: Any = None) -> dict[str, Any]:
    """A BE pod of one container asking for these batch-cpu/batch-memory requests and limits."""
    req = {k: v for k, v in ((BATCH_CPU, cpu), (BATCH_MEMORY, mem)) if v is not None}
    lim = {k: v for k, v in ((BATCH_CPU, lcpu), (BATCH_MEMORY, lmem)) if v is not None}
    return be_pod([container("app", req or None, lim or None)])
