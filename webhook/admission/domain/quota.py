"""ResourceQuota "covering quota" semantics for pods (pure, no I/O).

Follows the ResourceQuota admission plugin (``CheckRequest`` in
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``, the pod evaluator in
``pkg/quota/v1/evaluator/core/pods.go``): which limited scopes a pod falls under, which quota scopes cover them
(same scopeName covers, as ``UncoveredQuotaScopes``), which limited resource names need a covering quota
(``matchContains``), and upstream's error texts with Go ``%v`` formatting.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
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


def uncovered_scopes(limited: list[dict[str, Any]], covered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``UncoveredQuotaScopes``: a limited scope is covered by any matched quota scope of the same name."""
    names = {c.get("scopeName") for c in covered}
    return [s for s in limited if s.get("scopeName") not in names]


def format_scopes(requirements: list[dict[str, Any]]) -> str:
    """Go ``%v`` of ``[]ScopedResourceSelectorRequirement``: ``[{PriorityClass In [a b]} {BestEffort Exists []}]``."""
    parts = [f"{{{r.get('scopeName', '')} {r.get('operator', '')} [{' '.join(r.get('values') or [])}]}}"
             for r in requirements]
    return "[" + " ".join(parts) + "]"


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


def limited_resource_names(usage: dict[str, Decimal], entries: Iterable[dict[str, Any]]) -> list[str]:
    """``limitedByDefault``: usage names with a positive value containing any ``matchContains`` substring."""
    out: list[str] = []
    for entry in entries:
        for name, value in usage.items():
            if value > 0 and any(sub in name for sub in entry.get("matchContains") or []) and name not in out:
                out.append(name)
    return out


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


# -- the presence check -------------------------------------------------------------------------

@dataclass(slots=True)
class Presence:
    """The outcome of the covering-quota check, with what was found for ``--explain``."""

    error: str | None = None
    limited_scopes: list[dict[str, Any]] = field(default_factory=list)
    limited_names: list[str] = field(default_factory=list)
    covering_quotas: list[str] = field(default_factory=list)   # quotas with a matching scope
    tracking_quotas: list[str] = field(default_factory=list)   # quotas that match the pod


def check_presence(pod: dict[str, Any], limited_resources: list[dict[str, Any]], quotas: list[dict[str, Any]],
                   group: str = "", resource: str = "pods") -> Presence:
    """The covering-quota part of ``CheckRequest`` for a pod CREATE: the limited scopes and resources that no
    quota covers.

    The constraint, status and usage checks are the apiserver's own plugin's job and stay there.
    """
    out = Presence()
    if not quotas and not limited_resources:
        return out
    for entry in limited_resources:  # every entry, whatever its resource (step 2)
        out.limited_scopes += matching_scopes(pod, entry.get("matchScopes") or [])
    mine = [e for e in limited_resources if (e.get("apiGroup") or "") == group and e.get("resource") == resource]
    if mine:
        out.limited_names = limited_resource_names(pod_usage(pod), mine)
    restricted_scopes: list[dict[str, Any]] = []
    restricted_names: set[str] = set()
    for quota in quotas:
        name = (quota.get("metadata") or {}).get("name", "")
        local = matching_scopes(pod, quota_scope_selectors(quota))
        if local:
            out.covering_quotas.append(name)
        restricted_scopes += local
        if quota_matches_pod(quota, pod):
            out.tracking_quotas.append(name)
            restricted_names |= quota_tracked_resources(quota)
    missing = sorted(set(out.limited_names) - restricted_names)
    if missing:
        out.error = "insufficient quota to consume: " + ",".join(missing)
        return out
    uncovered = uncovered_scopes(out.limited_scopes, restricted_scopes)
    if uncovered:
        out.error = "insufficient quota to match these scopes: " + format_scopes(uncovered)
    return out


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


# -- the pod evaluator's constraints --------------------------------------------------------------

# ``validationSet``: a quota on any of these makes every container name it (a compatibility rule upstream keeps).
CONSTRAINED = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")


def _container_names(resources: Any) -> set[str]:
    """``podComputeUsageHelper``'s names for the constrained resources a container sets."""
    res = as_object(resources)
    requests, limits = as_object(res.get("requests")), as_object(res.get("limits"))
    out = set()
    for name in ("cpu", "memory"):
        if name in requests:
            out |= {name, REQUESTS_PREFIX + name}
        if name in limits:
            out.add("limits." + name)
    return out


def missing_constraints(quota: dict[str, Any], pod: dict[str, Any]) -> dict[str, list[str]]:
    """``podEvaluator.Constraints``: for each constrained resource the quota tracks, the containers and init
    containers (sorted names) that do not set it; empty when the quota asks nothing of this pod."""
    required = set(CONSTRAINED) & quota_tracked_resources(quota)
    if not required:
        return {}
    spec = as_object(pod.get("spec"))
    missing: dict[str, set[str]] = {}
    for field_name in ("containers", "initContainers"):
        for c in spec.get(field_name) or ():
            if isinstance(c, dict):
                for name in required - _container_names(c.get("resources")):
                    missing.setdefault(name, set()).add(str(c.get("name") or ""))
    return {name: sorted(containers) for name, containers in sorted(missing.items())}


def constraints_text(missing: dict[str, list[str]]) -> str:
    """The apiserver's words: ``must specify limits.cpu for: main; requests.cpu for: init,main``."""
    return "must specify " + "; ".join(f"{name} for: {','.join(names)}" for name, names in missing.items())


def refusing_quota(pod: dict[str, Any], quotas: Iterable[dict[str, Any]]) -> tuple[str, dict[str, list[str]]] | None:
    """The first quota (by name) whose scopes match ``pod`` and whose constraints it fails, and what is missing.

    Upstream checks the quotas in its informer's order and reports the first that fails; by name is the same
    verdict, and the same quota every time."""
    for quota in sorted(quotas, key=lambda q: str(as_object(q.get("metadata")).get("name", ""))):
        if not quota_matches_pod(quota, pod):
            continue
        missing = missing_constraints(quota, pod)
        if missing:
            return str(as_object(quota.get("metadata")).get("name", "")), missing
    return None
