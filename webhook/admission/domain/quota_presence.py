"""The quota-presence rule's check (pure, no I/O): a pod whose PriorityClass (or another limited scope) the
apiserver's ResourceQuota plugin limits needs a quota that covers it, as ``CheckRequest`` decides
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``: the limited scopes and resources
that no quota covers), with upstream's error texts in Go ``%v`` formatting. The scopes
and the usage it reads are ``webhook.admission.domain.quota``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.admission.domain.quota import (
    matching_scopes,
    pod_usage,
    quota_matches_pod,
    quota_scope_selectors,
    quota_tracked_resources,
)


def uncovered_scopes(limited: list[dict[str, Any]], covered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``UncoveredQuotaScopes``: a limited scope is covered by any matched quota scope of the same name."""
    names = {c.get("scopeName") for c in covered}
    return [s for s in limited if s.get("scopeName") not in names]


def format_scopes(requirements: list[dict[str, Any]]) -> str:
    """Go ``%v`` of ``[]ScopedResourceSelectorRequirement``: ``[{PriorityClass In [a b]} {BestEffort Exists []}]``."""
    parts = [f"{{{r.get('scopeName', '')} {r.get('operator', '')} [{' '.join(r.get('values') or [])}]}}"
             for r in requirements]
    return "[" + " ".join(parts) + "]"


def limited_resource_names(usage: dict[str, Decimal], entries: Iterable[dict[str, Any]]) -> list[str]:
    """``limitedByDefault``: usage names with a positive value containing any ``matchContains`` substring."""
    out: list[str] = []
    for entry in entries:
        for name, value in usage.items():
            if value > 0 and any(sub in name for sub in entry.get("matchContains") or []) and name not in out:
                out.append(name)
    return out


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
