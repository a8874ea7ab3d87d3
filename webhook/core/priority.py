"""Priority classes: the in-tree Priority plugin's resolution and Koordinator's priority bands."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

PREEMPT_LOWER = "PreemptLowerPriority"
DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS = 0

# The apiserver creates these at bootstrap; they always exist (``pkg/apis/scheduling/v1/helpers.go``).
SYSTEM_PRIORITY_CLASSES: dict[str, dict[str, Any]] = {
    "system-cluster-critical": {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "system-cluster-critical"}, "value": 2000000000,
        "globalDefault": False, "preemptionPolicy": PREEMPT_LOWER,
    },
    "system-node-critical": {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "system-node-critical"}, "value": 2000001000,
        "globalDefault": False, "preemptionPolicy": PREEMPT_LOWER,
    },
}

# Koordinator priority bands (inclusive), ``apis/extension/priority.go``.
KOORD_PROD, KOORD_MID, KOORD_BATCH, KOORD_FREE, KOORD_NONE = (
    "koord-prod", "koord-mid", "koord-batch", "koord-free", "")
BANDS: tuple[tuple[str, int, int], ...] = (
    (KOORD_PROD, 9000, 9999),
    (KOORD_MID, 7000, 7999),
    (KOORD_BATCH, 5000, 5999),
    (KOORD_FREE, 3000, 3999),
)
# Each class's default priority, for a pod whose spec.priority is unset or 0 (apis/extension/priority_utils.go).
DEFAULT_PRIORITY = {KOORD_PROD: 9500, KOORD_MID: 7500, KOORD_BATCH: 5500, KOORD_FREE: 3500, KOORD_NONE: 0}
PRIORITY_CLASS_LABEL = "koordinator.sh/priority-class"
SUB_PRIORITY_LABEL = "koordinator.sh/priority"


def band_of(priority: int | None) -> str:
    """The Koordinator priority class whose band holds ``priority`` ("" for none)."""
    if priority is None:
        return KOORD_NONE
    for name, low, high in BANDS:
        if low <= priority <= high:
            return name
    return KOORD_NONE


def koord_priority_class(pod: dict[str, Any]) -> str:
    """The pod's raw Koordinator priority class: the label if set, else the band of spec.priority."""
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    if label is not None:
        return label if label in (KOORD_PROD, KOORD_MID, KOORD_BATCH, KOORD_FREE) else KOORD_NONE
    prio = (pod.get("spec") or {}).get("priority")
    return band_of(prio if isinstance(prio, int) and not isinstance(prio, bool) else None)


def preemption_policy_of(pc: dict[str, Any]) -> str:
    """A PriorityClass without preemptionPolicy means PreemptLowerPriority (apiserver defaulting)."""
    return pc.get("preemptionPolicy") or PREEMPT_LOWER


def default_priority_class(classes: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The globalDefault class with the lowest value (upstream's tie-break), or None."""
    best = None
    for pc in classes:
        if pc.get("globalDefault") is not True:
            continue
        rank = (pc.get("value", 0), pc["metadata"]["name"])
        if best is None or rank < (best.get("value", 0), best["metadata"]["name"]):
            best = pc
    return best


# Not frozen: a frozen one costs more to make, and every review makes one (docs/benchmarks.md, "The review path
# trimmed").
@dataclass(slots=True)
class PriorityResolution:
    """What the Priority plugin computes for a pod CREATE, or the Forbidden text it answers."""

    class_name: str
    priority: int
    preemption_policy: str
    error: str | None = None


def resolve_priority(
    spec: dict[str, Any],
    lookup: Callable[[str], dict[str, Any] | None],
    default_class: dict[str, Any] | None,
) -> PriorityResolution:
    """The in-tree Priority plugin's CREATE rules (``plugin/pkg/admission/priority/admission.go``), error
    texts word for word."""
    name = spec.get("priorityClassName") or ""
    if not name:
        if default_class is not None:
            name = default_class["metadata"]["name"]
            value, policy = int(default_class.get("value", 0)), preemption_policy_of(default_class)
        else:
            value, policy = DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS, PREEMPT_LOWER
    else:
        pc = lookup(name)
        if pc is None:
            return PriorityResolution(name, 0, PREEMPT_LOWER, f"no PriorityClass with name {name} was found")
        value, policy = int(pc.get("value", 0)), preemption_policy_of(pc)
    given = spec.get("priority")
    if given is not None and given != value:
        return PriorityResolution(
            name, value, policy,
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {value} from the given PriorityClass name")
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        return PriorityResolution(
            name, value, policy,
            f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod spec; "
            f"priority admission controller computed {policy} from the given PriorityClass name")
    return PriorityResolution(name, value, policy)
