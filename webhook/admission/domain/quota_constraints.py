"""The quota-constraints rule's check (pure, no I/O): a ResourceQuota that tracks cpu or memory makes every
container of a pod it matches name them (``podEvaluator.Constraints``), as the apiserver refuses it, with its
text. Which quotas match a pod is ``webhook.admission.domain.quota``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.admission.domain.quota import REQUESTS_PREFIX, quota_matches_pod, quota_tracked_resources
from webhook.core.resources import as_object

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
