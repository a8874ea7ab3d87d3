"""QoS classes: Koordinator's (label) and the kubelet's (computed from cpu/memory)."""

from __future__ import annotations

from typing import Any

from webhook.core.priority import KOORD_BATCH, KOORD_NONE, KOORD_PROD, koord_priority_class
from webhook.core.quantity import QuantityError, parse_quantity
from webhook.core.resources import CPU, MEMORY, pod_level

QOS_LABEL = "koordinator.sh/qosClass"
# Legacy ACK protocol: the annotation counts as the label (docs/admission-rules-validating.md, the legacy
# ack-slo-manager protocol).
LEGACY_QOS_ANNOTATION = "alibabacloud.com/qosClass"
KOORD_QOS_CLASSES = ("LSE", "LSR", "LS", "BE", "SYSTEM")


def koord_qos_class(pod: dict[str, Any]) -> str:
    """The pod's Koordinator QoS class as written by the user ("" when none or unknown)."""
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(QOS_LABEL)
    if value is None:
        value = (meta.get("annotations") or {}).get(LEGACY_QOS_ANNOTATION)
    return value if value in KOORD_QOS_CLASSES else ""


# The QoS class Koordinator pairs with a priority band (``apis/extension/priority_utils.go``: BE derives koord-batch,
# and koord-batch pods with batch resources must be BE). koord-mid has no such pair: no QoS class
# derives it and its resources need none.
BAND_QOS_CLASS = {KOORD_BATCH: "BE"}


def states_qos_class(pod: dict[str, Any]) -> bool:
    """Whether the pod says its QoS class at all: the label, or the legacy annotation, with any value
    (an unknown value is the user's to fix, not ours to overwrite)."""
    meta = pod.get("metadata") or {}
    return QOS_LABEL in (meta.get("labels") or {}) or LEGACY_QOS_ANNOTATION in (meta.get("annotations") or {})


def is_terminal(pod: dict[str, Any]) -> bool:
    """Succeeded or Failed: the pod's containers are done; it holds no resources (quota usage, the
    kubelet's eviction candidates, cgroups)."""
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")


def is_be(pod: dict[str, Any]) -> bool:
    return koord_qos_class(pod) == "BE"


def kube_qos_class(pod: dict[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort, by the kubelet's rules (status.qosClass wins)."""
    status_qos = (pod.get("status") or {}).get("qosClass")
    if status_qos:
        return str(status_qos)
    spec = pod.get("spec") or {}
    if spec.get("resources"):  # pod-level resources (on by default since 1.34) decide when set
        level = pod_level(spec)
        if level is not None:
            return _pod_level_qos_class(*level)
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        c_limits = 0
        for kind, acc in (("requests", requests), ("limits", limits)):
            for name in ("cpu", "memory"):
                raw = (res.get(kind) or {}).get(name)
                if raw is None and kind == "requests":
                    # API defaulting copies a limit into a missing request.
                    raw = (res.get("limits") or {}).get(name)
                if raw is None:
                    continue
                try:
                    q = parse_quantity(raw)
                except QuantityError:
                    continue
                if q <= 0:
                    continue
                acc[name] = acc.get(name, 0) + q
                if kind == "limits":
                    c_limits += 1
        if c_limits < 2:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests.keys() == limits.keys() and all(requests[k] == limits[k] for k in limits):
        return "Guaranteed"
    return "Burstable"


def _pod_level_qos_class(requests: dict[str, Any], limits: dict[str, Any]) -> str:
    """``ComputePodQOS`` with pod-level resources: the pod-level cpu/memory requests and limits (defaulted) alone
    decide, by the same rule as the containers'."""
    requests = {k: v for k, v in requests.items() if k in (CPU, MEMORY) and v > 0}
    limits = {k: v for k, v in limits.items() if k in (CPU, MEMORY) and v > 0}
    if not requests and not limits:
        return "BestEffort"
    if limits.keys() == {CPU, MEMORY} and requests == limits:
        return "Guaranteed"
    return "Burstable"


def priority_class_with_default(pod: dict[str, Any]) -> str:
    """Koordinator's ``GetPodPriorityClassWithDefault`` (``apis/extension/priority_utils.go``): the raw class (label,
    else the band of spec.priority), else the one its QoS class derives: BE (the label, or the kubelet's
    BestEffort without one) koord-batch, any other koord-prod."""
    raw = koord_priority_class(pod)
    if raw != KOORD_NONE:
        return raw
    qos = koord_qos_class(pod) or {"BestEffort": "BE"}.get(kube_qos_class(pod), "LS")
    return KOORD_BATCH if qos == "BE" else KOORD_PROD
