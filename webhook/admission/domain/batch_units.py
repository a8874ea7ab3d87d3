"""The batch-units rule's check (pure, no I/O): batch-cpu counts milli-cores as a whole number ("1k" is one
core), batch-memory whole bytes, neither is negative, and a request is not above its limit.
"""

from __future__ import annotations

from decimal import Decimal

from webhook.core.fielderrors import invalid
from webhook.core.quantity import QuantityError, is_whole, parse_quantity
from webhook.core.resources import (
    BATCH_CPU,
    BATCH_NAMES,
    LEGACY_BATCH,
    OVERHEAD,
    ResourceList,
    resource_list_path,
    shown,
)

# {name}: kubernetes.io/batch-cpu, or the legacy alibabacloud.com/reclaimed-cpu it stands for
CPU_WHOLE = "{name} counts milli-cores and must be a whole number: write 500 for half a core, 1k or 1000 for one core"
MEMORY_WHOLE = "{name} counts bytes and must be a whole number: write 512Mi or 536870912 for half a gibibyte"
NEGATIVE = "must be greater than or equal to 0"  # upstream ValidateNonnegativeQuantity
_ABSENT = object()


def _batch_quantity(name: str, raw: object) -> tuple[str | None, Decimal | None]:
    """(what is wrong or None, the value; None for a text that is no quantity, which
    ``resources.quantity_errors`` reports)."""
    try:
        q = parse_quantity(raw)
    except QuantityError:
        return None, None
    if q < 0:
        return NEGATIVE, None
    if not is_whole(q):
        text = CPU_WHOLE if LEGACY_BATCH.get(name, name) == BATCH_CPU else MEMORY_WHOLE
        return text.format(name=name), None
    return None, q


def unit_problems(lists: list[ResourceList]) -> list[str]:
    """Upstream ``field.Error`` texts, with the field path, for the batch-cpu and batch-memory
    quantities of the pod (its ``resource_lists``): not whole, negative, or a request above its limit.

    ``spec.overhead`` is left out: the RuntimeClass defines it and the RuntimeClass plugin refuses a pod whose
    overhead differs, so the pod's author could not follow any advice about it (the apiserver checks it is not
    negative).
    """
    errors: list[str] = []
    # (field, index, name) -> (raw, value), per kind: one entry per resources block and batch resource
    requests: dict[tuple[str, int, str], tuple[object, Decimal]] = {}
    limits: dict[tuple[str, int, str], tuple[object, Decimal]] = {}
    for _, field, index, kind, values in lists:
        if field == OVERHEAD:
            continue
        for name in BATCH_NAMES:
            raw = values.get(name, _ABSENT)
            if raw is _ABSENT:
                continue
            problem, q = _batch_quantity(name, raw)
            if problem is not None:
                errors.append(invalid(f"{resource_list_path(field, index, kind)}[{name}]", shown(raw), problem))
                continue
            if q is None:
                continue
            if kind == "requests":
                requests[(field, index, name)] = (raw, q)
            elif kind == "limits":
                limits[(field, index, name)] = (raw, q)
    # A request may not exceed its limit. kubernetes.io/batch-* are prefixed native resources, which
    # the apiserver lets a pod overcommit (request <= limit, upstream's text: ``validateResourceRequirements`` in
    # ``pkg/apis/core/validation/validation.go``), and Koordinator's own conversion of a Burstable pod
    # (500m/1 -> 500/1000) relies on it: demanding request == limit would deny the mutating chain's own output.
    for (field, index, name), (raw, q) in requests.items():
        limit = limits.get((field, index, name))
        if limit is not None and q > limit[1]:
            errors.append(invalid(resource_list_path(field, index, "requests"), shown(raw),
                                  f"must be less than or equal to {name} limit of {shown(limit[0])}"))
    return errors
