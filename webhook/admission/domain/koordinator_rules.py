"""Koordinator's pod validating rules with its texts (pure, no I/O).

Mirrors ``pkg/webhook/pod/validating/cluster_colocation_profile.go``: the checks run in upstream's
order and every error is collected; callers join them with ``fielderrors.aggregate``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from webhook.core.fielderrors import forbidden, invalid, required
from webhook.core.priority import (
    KOORD_BATCH,
    KOORD_FREE,
    KOORD_MID,
    KOORD_NONE,
    KOORD_PROD,
    SUB_PRIORITY_LABEL,
    koord_priority_class,
)
from webhook.core.qos import QOS_LABEL, koord_qos_class
from webhook.core.quantity import format_decimal_si, int_value, milli_value
from webhook.core.resources import BATCH_NAMES, CPU, pod_requests

IMMUTABLE = "field is immutable"  # apimachinery FieldImmutableErrorMsg
# (QoS class, priority classes it must not be combined with), in upstream's order.
FORBIDDEN_COMBINATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("BE", (KOORD_NONE, KOORD_PROD)),
    ("LSR", (KOORD_NONE, KOORD_MID, KOORD_BATCH, KOORD_FREE)),
)
CPU_PATH = "pod.spec.containers[*].resources.requests"
NEEDS_BE = "must specify koordinator QoS BE with koordinator colocation resources"
FORBIDDEN_PAIR = "{label}={qos} and priorityClass={klass} cannot be used in combination"
CPU_REQUIRED = "LSR Pod must declare the requested CPUs"  # upstream says "LSR" for LSE pods too


def _label(pod: dict[str, Any], key: str) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(key) or ""


def immutable_errors(old: dict[str, Any], new: dict[str, Any], check_sub_priority: bool = True) -> list[str]:
    """UPDATE: the QoS class, the raw priority class and the sub-priority label must not change."""
    errors = []
    if koord_qos_class(old) != koord_qos_class(new):
        errors.append(invalid(f"labels.{QOS_LABEL}", koord_qos_class(new), IMMUTABLE))
    if koord_priority_class(old) != koord_priority_class(new):
        errors.append(invalid("spec.priority", koord_priority_class(new), IMMUTABLE))
    if check_sub_priority and _label(old, SUB_PRIORITY_LABEL) != _label(new, SUB_PRIORITY_LABEL):
        errors.append(invalid(f"labels.{SUB_PRIORITY_LABEL}", _label(new, SUB_PRIORITY_LABEL), IMMUTABLE))
    return errors


def pod_errors(pod: dict[str, Any]) -> list[str]:
    """The CREATE and UPDATE checks on one pod: batch needs BE, forbidden pairs, LSR/LSE whole cpus."""
    errors = []
    qos = koord_qos_class(pod)
    requests = pod_requests(pod)
    if any(requests.get(name, 0) != 0 for name in BATCH_NAMES) and qos != "BE":
        errors.append(required(f"labels.{QOS_LABEL}", NEEDS_BE))
    for bad_qos, classes in FORBIDDEN_COMBINATIONS:
        if qos == bad_qos:
            klass = koord_priority_class(pod)
            if klass in classes:
                errors.append(forbidden("Pod", FORBIDDEN_PAIR.format(label=QOS_LABEL, qos=qos, klass=klass)))
    if qos in ("LSR", "LSE"):
        cpu = requests.get(CPU, Decimal(0))
        if cpu == 0:
            errors.append(required(CPU_PATH, CPU_REQUIRED))
        elif int_value(cpu) * 1000 != milli_value(cpu):
            errors.append(invalid(CPU_PATH, format_decimal_si(cpu), "the requested CPUs of LSR Pod must be integer"))
    return errors
