"""LimitRanger's validation (``PodValidateLimitFunc``) of the cpu and memory constraints a batch pod cannot meet.

After the webhooks, the apiserver's LimitRanger checks every LimitRange of the pod's namespace against the pod:
per container (``type: Container``) and for the pod as a whole (``type: Pod``), a resource's ``min`` needs a
request, its ``max`` a limit, its ``maxLimitRequestRatio`` both. A pod converted to ``kubernetes.io/batch-cpu``/
``batch-memory`` names no cpu or memory, so each such constraint on cpu or memory refuses it, whatever the values
(the texts are upstream's ``minConstraint``, ``maxConstraint`` and ``limitRequestRatioConstraint``). Only that
case is foreseen here: a value below a min or above a max is LimitRanger's own to report. Pure.
"""

from __future__ import annotations

from typing import Any

from webhook.core.quantity import QuantityError, canonical
from webhook.core.resources import CPU, MEMORY, as_object, asks, iter_containers

NATIVE = (CPU, MEMORY)


def _shown(raw: Any) -> str:
    try:
        return canonical(raw)
    except QuantityError:
        return str(raw)


def _unmet(kind: str, name: str, item: dict[str, Any], has_request: bool, has_limit: bool) -> list[str]:
    errors = []
    minimum, maximum, ratio = (as_object(item.get(k)).get(name) for k in ("min", "max", "maxLimitRequestRatio"))
    if minimum is not None and not has_request:
        errors.append(f"minimum {name} usage per {kind} is {_shown(minimum)}.  No request is specified")
    if maximum is not None and not has_limit:
        errors.append(f"maximum {name} usage per {kind} is {_shown(maximum)}.  No limit is specified")
    if ratio is not None and not has_request:
        errors.append(f"{name} max limit to request ratio per {kind} is {_shown(ratio)}, but no request is "
                      "specified or request is 0")
    elif ratio is not None and not has_limit:
        errors.append(f"{name} max limit to request ratio per {kind} is {_shown(ratio)}, but no limit is specified "
                      "or limit is 0")
    return errors


def _names(resources: Any, kind: str) -> set[str]:
    values = as_object(as_object(resources).get(kind))
    return {n for n in NATIVE if n in values and asks(values[n])}


def unmet_constraints(pod: dict[str, Any], limit_range: dict[str, Any]) -> list[str]:
    """LimitRanger's texts for the cpu and memory constraints of ``limit_range`` that the pod cannot meet
    because it names no such request or limit; empty when there are none."""
    spec = as_object(pod.get("spec"))
    containers = [c for _, _, c in iter_containers(spec)]
    # For ``type: Pod`` LimitRanger reads the pod's requests and limits, where pod-level ones win (``podRequests``).
    level = spec.get("resources")
    errors: list[str] = []
    for item in as_object(limit_range.get("spec")).get("limits") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "Container":
            for c in containers:
                requests, limits = _names(c.get("resources"), "requests"), _names(c.get("resources"), "limits")
                for name in NATIVE:
                    errors += _unmet("Container", name, item, name in requests | limits, name in limits)
        elif item.get("type") == "Pod":
            requests = set().union(*(_names(c.get("resources"), "requests") | _names(c.get("resources"), "limits")
                                     for c in containers))
            limits = set().union(*(_names(c.get("resources"), "limits") for c in containers))
            if level:
                limits |= _names(level, "limits")
                requests |= _names(level, "requests") | limits   # defaulting copies a pod-level limit
            for name in NATIVE:
                errors += _unmet("Pod", name, item, name in requests, name in limits)
    return list(dict.fromkeys(errors))
