"""Builders shared by the mutating-chain tests: cluster objects, pods, requests, running the chain."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from webhook.admission import chain
from webhook.admission.response import Decision
from webhook.admission.review import AdmissionRequest, request_from_dict
from webhook.cluster.state import KINDS, WEBHOOK_KINDS, ClusterState


def priority_class(name: str, value: int, default: bool = False,
                   policy: str | None = "PreemptLowerPriority") -> dict[str, Any]:
    pc: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value, "globalDefault": default}
    if policy is not None:
        pc["preemptionPolicy"] = policy
    return pc


KOORD_CLASSES = [priority_class("koord-prod", 9000), priority_class("koord-mid", 7000),
                 priority_class("koord-batch", 5000), priority_class("koord-free", 3000)]


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


NAMESPACES = [namespace("default"), namespace("colo-demo", **{"koordinator.sh/enable-colocation": "true"}),
              namespace("prod-apps", team="prod")]


def profile(name: str, meta_annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if meta_annotations:
        meta["annotations"] = meta_annotations
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": meta, "spec": spec}


def make_state(*objects: dict[str, Any], base: bool = True) -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for obj in ([*KOORD_CLASSES, *NAMESPACES] if base else []) + list(objects):
        by_kind[obj["kind"]].append(copy.deepcopy(obj))
    state.replace_all(by_kind)
    return state


def pod(name: str | None = "p", ns: str = "default", labels: dict[str, Any] | None = None,
        annotations: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None, generate_name: str | None = None, **spec: Any) -> dict[str, Any]:
    """A pod as the apiserver hands it to a mutating webhook (spec.priority already resolved)."""
    meta: dict[str, Any] = {"namespace": ns}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    body: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx", "resources": resources}],
                            "schedulerName": "default-scheduler"}
    body.update(spec)
    body.setdefault("priority", 0)
    body.setdefault("preemptionPolicy", "PreemptLowerPriority")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
            uid: str = "u-1") -> AdmissionRequest:
    meta = obj.get("metadata") or {}
    return request_from_dict({
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": meta.get("name") or "", "namespace": meta.get("namespace") or "default",
        "operation": operation, "userInfo": {}, "object": obj, "oldObject": old})


def mutate(obj: dict[str, Any], state: ClusterState, explain: list[str] | None = None,
           uid: str = "u-1") -> tuple[Decision, dict[str, Any] | None]:
    """Run the chain; return the decision and the pod with the patch applied by ``jsonpatch``."""
    decision = chain.mutate(request(copy.deepcopy(obj), uid=uid), state, chain.Settings(), explain)
    assert not decision.rule_failed, decision.warnings
    if not decision.allowed:
        return decision, None
    return decision, jsonpatch.apply_patch(obj, decision.patch)


def mutated(obj: dict[str, Any], state: ClusterState, explain: list[str] | None = None,
            uid: str = "u-1") -> dict[str, Any]:
    """The pod as the chain admits it, for a pod it is meant to allow: ``mutate``'s second half, never None."""
    decision, out = mutate(obj, state, explain, uid)
    assert out is not None, decision.message
    return out


def labels_of(obj: dict[str, Any]) -> dict[str, Any]:
    labels: dict[str, Any] = obj["metadata"].get("labels") or {}
    return labels


def resources_of(obj: dict[str, Any], i: int = 0, field: str = "containers") -> dict[str, Any]:
    resources: dict[str, Any] = obj["spec"][field][i]["resources"]
    return resources
