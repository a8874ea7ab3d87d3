"""ResourceQuota's scopes and a pod's usage as its admission plugin reads them (pure, no I/O), shared by the
quota-presence and quota-constraints rules (``quota_presence``, ``quota_constraints``) and ``--quota-config``.

Follows the ResourceQuota admission plugin (``CheckRequest`` in
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``,
``pkg/quota/v1/evaluator/core/pods.go``): which scopes a pod falls under (``MatchingScopes``), which quotas track it
(``generic.Matches``), what a pod uses, and a scope requirement's validation with core validation's texts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from webhook.core.qos import is_terminal, kube_qos_class
from webhook.core.resources import CPU, MEMORY, as_object, pod_limits, pod_requests
from webhook.core.selectors import expression_matches

SCOPE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# Scopes a pod is evaluated against; VolumeAttributesClass belongs to PVCs and never matches a pod.
POD_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
              "CrossNamespacePodAffinity")
KNOWN_SCOPES = (*POD_SCOPES, "VolumeAttributesClass")
EXISTS_ONLY_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "CrossNamespacePodAffinity")

POD_COUNT = "count/pods"
EPHEMERAL = "ephemeral-storage"
REQUESTS_PREFIX = "requests."
HUGEPAGES_PREFIX = "hugepages-"
# Resources the pod evaluator tracks in a quota's hard list (``podResources``), plus prefixes.
POD_QUOTA_RESOURCES = frozenset({
    POD_COUNT, "pods", CPU, MEMORY, EPHEMERAL, "requests.cpu", "requests.memory", "requests.ephemeral-storage",
    "limits.cpu", "limits.memory", "limits.ephemeral-storage",
})
POD_QUOTA_PREFIXES = (HUGEPAGES_PREFIX, REQUESTS_PREFIX + HUGEPAGES_PREFIX)


# -- scopes -----------------------------------------------------------------------------------

def _is_native(name: str) -> bool:
    """``IsNativeResource``: no domain, or a ``kubernetes.io/`` one (so batch-cpu is native)."""
    return "/" not in name or "kubernetes.io/" in name


def _is_extended(name: str) -> bool:
    """``IsExtendedResourceName`` (the qualified-name check on ``requests.<name>`` is left to the apiserver)."""
    return not _is_native(name) and not name.startswith(REQUESTS_PREFIX)


def _terminating(pod: dict[str, Any]) -> bool:
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0


def _cross_namespace_affinity(pod: dict[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(kind) or {}
        required = terms.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        preferred = [(w or {}).get("podAffinityTerm") or {}
                     for w in terms.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
        for term in list(required) + preferred:
            if isinstance(term, dict) and (term.get("namespaces") or term.get("namespaceSelector") is not None):
                return True
    return False


def pod_matches_scope(pod: dict[str, Any], requirement: dict[str, Any]) -> bool:
    """``podMatchesScopeFunc``: PriorityClass uses label-selector semantics on ``{PriorityClass: name}``
    (an empty map when the pod has no class); an unknown scope never matches."""
    scope = requirement.get("scopeName")
    if scope == "Terminating":
        return _terminating(pod)
    if scope == "NotTerminating":
        return not _terminating(pod)
    if scope == "BestEffort":
        return kube_qos_class(pod) == "BestEffort"
    if scope == "NotBestEffort":
        return kube_qos_class(pod) != "BestEffort"
    if scope == "CrossNamespacePodAffinity":
        return _cross_namespace_affinity(pod)
    if scope == "PriorityClass":
        name = (pod.get("spec") or {}).get("priorityClassName") or ""
        op = requirement.get("operator")
        if op not in SCOPE_OPERATORS:
            return False  # the apiserver refuses such quotas; a hand-written file may still hold one
        labels = {"PriorityClass": name} if name else {}
        return expression_matches(op, "PriorityClass", list(requirement.get("values") or []), labels)
    return False


def matching_scopes(pod: dict[str, Any], requirements: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requirements the pod satisfies, each on its own (``MatchingScopes``)."""
    return [r for r in requirements if pod_matches_scope(pod, r)]


def quota_scope_selectors(quota: dict[str, Any]) -> list[dict[str, Any]]:
    """``spec.scopes`` (each as Exists) then ``spec.scopeSelector.matchExpressions``."""
    spec = as_object(quota.get("spec"))
    scopes = spec.get("scopes")
    out = [{"scopeName": s, "operator": "Exists"} for s in (scopes if isinstance(scopes, list) else [])
           if isinstance(s, str)]
    exprs = as_object(spec.get("scopeSelector")).get("matchExpressions")
    out += [e for e in (exprs if isinstance(exprs, list) else []) if isinstance(e, dict)]
    return out


# -- usage ------------------------------------------------------------------------------------

def pod_usage(pod: dict[str, Any]) -> dict[str, Decimal]:
    """What quota charges for a pod (``PodUsageFunc``): ``count/pods`` always, compute usage unless terminal.

    ``cpu``/``memory``/``ephemeral-storage`` are aliases of their ``requests.`` names; extended
    resources count only as ``requests.<name>``; ``kubernetes.io/`` names (batch-cpu) are native
    and therefore not charged at all.
    """
    usage: dict[str, Decimal] = {POD_COUNT: Decimal(1)}
    if is_terminal(pod):
        return usage
    usage["pods"] = Decimal(1)
    requests, limits = pod_requests(pod), pod_limits(pod)  # pod-level resources and sidecars as upstream
    for name in (CPU, MEMORY, EPHEMERAL):
        if name in requests:
            usage[name] = usage[REQUESTS_PREFIX + name] = requests[name]
        if name in limits:
            usage["limits." + name] = limits[name]
    for name, value in requests.items():
        if name.startswith(HUGEPAGES_PREFIX):
            usage[name] = usage[REQUESTS_PREFIX + name] = value
        elif _is_extended(name):
            usage[REQUESTS_PREFIX + name] = value
    return usage


def quota_tracked_resources(quota: dict[str, Any]) -> set[str]:
    """``MatchingResources`` over the quota's hard list.

    Upstream reads ``status.hard`` (filled by the quota controller); a quota written by hand with
    no status yet falls back to ``spec.hard``: we only ever allow more, and the apiserver's own
    plugin still runs after us.
    """
    status_hard = as_object(quota.get("status")).get("hard")
    hard = status_hard if isinstance(status_hard, dict) else as_object(as_object(quota.get("spec")).get("hard"))
    return {n for n in hard if isinstance(n, str) and (
        n in POD_QUOTA_RESOURCES or n.startswith(POD_QUOTA_PREFIXES)
        or (not _is_native(n) and n.startswith(REQUESTS_PREFIX)))}


def quota_matches_pod(quota: dict[str, Any], pod: dict[str, Any]) -> bool:
    """``generic.Matches``: the quota tracks a pod resource and every one of its scopes matches."""
    return bool(quota_tracked_resources(quota)) and all(
        pod_matches_scope(pod, s) for s in quota_scope_selectors(quota))


def _q(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def scope_requirement_error(req: Any, where: str) -> str | None:
    """Why ``req`` is not a usable ScopedResourceSelectorRequirement (texts from core validation), or None."""
    if not isinstance(req, dict):
        return f"{where}: must be an object with scopeName, operator and values"
    scope, op, values = req.get("scopeName"), req.get("operator"), req.get("values")
    if not scope:
        return f"{where}.scopeName: Required value"
    if scope not in KNOWN_SCOPES:
        return (f"{where}.scopeName: Unsupported value: {_q(scope)}: supported values: "
                + ", ".join(f'"{s}"' for s in KNOWN_SCOPES))
    if op not in SCOPE_OPERATORS:
        return f"{where}.operator: Invalid value: {_q(op)}: not a valid selector operator"
    if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
        return f"{where}.values: must be a list of strings"
    if op in ("In", "NotIn") and not values:
        return (f"{where}.values: Invalid value: {_q(values or [])}: must be at least one value when `operator` "
                "is 'In' or 'NotIn' for scope selector")
    if op in ("Exists", "DoesNotExist") and values:
        return (f"{where}.values: Invalid value: {_q(values)}: must be no value when `operator` is 'Exist' or "
                "'DoesNotExist' for scope selector")
    if scope in EXISTS_ONLY_SCOPES and op != "Exists":
        return f"{where}.operator: Invalid value: {_q(op)}: must be 'Exists' when scope is {scope}"
    return None
