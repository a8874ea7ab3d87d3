"""Checks on how a pod writes batch resources (the batch rules of both chains; pure, no I/O).

The rules of docs/admission-rules-validating.md (rules 1 and 2): a pod must not ask for batch resources and
native cpu/memory together, batch-cpu counts milli-cores as a whole number ("1k" is one core) and batch-memory
whole bytes.
"""

from __future__ import annotations

from decimal import Decimal

from webhook.core.fielderrors import invalid
from webhook.core.quantity import QuantityError, is_whole, parse_quantity
from webhook.core.resources import (
    BATCH_CPU,
    BATCH_NAMES,
    LEGACY_BATCH,
    NATIVE_RESOURCES,
    POD_LEVEL_OWNER,
    ResourceList,
    asks,
    resource_list_path,
    shown,
)

MIXING_ADVICE = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
                 "or native cpu and memory, not both")
POD_LEVEL_ADVICE = ("remove cpu and memory from spec.resources and write them in the containers as "
                    "kubernetes.io/batch-cpu and batch-memory (the apiserver takes no batch resource at pod level)")
PROTOCOL_ADVICE = ("a pod names its batch resources in one protocol: kubernetes.io/batch-cpu and batch-memory "
                   "(Koordinator) or the legacy alibabacloud.com/reclaimed-cpu and reclaimed-memory, not both")
# {name}: kubernetes.io/batch-cpu, or the legacy alibabacloud.com/reclaimed-cpu it stands for
CPU_WHOLE = "{name} counts milli-cores and must be a whole number: write 500 for half a core, 1k or 1000 for one core"
MEMORY_WHOLE = "{name} counts bytes and must be a whole number: write 512Mi or 536870912 for half a gibibyte"
NEGATIVE = "must be greater than or equal to 0"  # upstream ValidateNonnegativeQuantity
OVERHEAD = "overhead"  # the ``resource_lists`` field of spec.overhead: the RuntimeClass's, not the author's
SMALL_BATCH_CPU = 100  # below a tenth of a core: almost certainly meant as cores
_ABSENT = object()


def mixing_error(lists: list[ResourceList]) -> str | None:
    """The denial text when the pod (its ``resource_lists``) asks for batch and native cpu/memory together, or
    for batch resources by both their names (the legacy ``alibabacloud.com/reclaimed-*`` and Koordinator's),
    else None.

    Pod-level resources (``spec.resources``) count like a container's. ``spec.overhead`` does not: the RuntimeClass
    plugin writes it from the RuntimeClass and refuses the pod after the webhooks unless it still holds exactly
    that, so a batch pod's sandbox overhead is native cpu/memory by necessity, never the pod author's mix.
    """
    batch: dict[str, list[str]] = {}   # owner -> names asked for, in spec order
    native: dict[str, list[str]] = {}
    legacy = False
    for owner, field, _, _, values in lists:
        if field == OVERHEAD:
            continue
        for name, raw in values.items():
            bucket = batch if name in BATCH_NAMES else native if name in NATIVE_RESOURCES else None
            if bucket is not None and asks(raw):
                names = bucket.setdefault(owner, [])
                if name not in names:
                    names.append(name)
                    legacy = legacy or name in LEGACY_BATCH
    if legacy:
        protocols = _protocol_mix(batch)
        if protocols is not None:
            return protocols
    if not batch or not native:
        return None
    for owner, names in batch.items():  # one owner asking for both reads best
        if owner in native:
            return f"{owner} asks for both {names[0]} and {native[owner][0]}: {MIXING_ADVICE}"
    b_owner, b_names = next(iter(batch.items()))
    n_owner, n_names = next(iter(native.items()))
    advice = MIXING_ADVICE
    if POD_LEVEL_OWNER in native:  # the pod level takes no batch resource: say where they go instead
        n_owner, n_names = POD_LEVEL_OWNER, native[POD_LEVEL_OWNER]
        advice += "; " + POD_LEVEL_ADVICE
    return f"{b_owner} asks for {b_names[0]} and {n_owner} asks for {n_names[0]}: {advice}"


def _protocol_mix(batch: dict[str, list[str]]) -> str | None:
    """The text when the batch names (by owner) are of both protocols, else None."""
    for owner, names in batch.items():  # one owner naming both reads best
        legacy_names = [n for n in names if n in LEGACY_BATCH]
        koord_names = [n for n in names if n not in LEGACY_BATCH]
        if legacy_names and koord_names:
            return f"{owner} asks for both {legacy_names[0]} and {koord_names[0]}: {PROTOCOL_ADVICE}"
    used = [(owner, n) for owner, names in batch.items() for n in names]
    legacy_use = next(((o, n) for o, n in used if n in LEGACY_BATCH), None)
    koord_use = next(((o, n) for o, n in used if n not in LEGACY_BATCH), None)
    if legacy_use is not None and koord_use is not None:
        return (f"{legacy_use[0]} asks for {legacy_use[1]} and {koord_use[0]} asks for {koord_use[1]}: "
                f"{PROTOCOL_ADVICE}")
    return None


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


def small_batch_cpu_warnings(lists: list[ResourceList]) -> list[str]:
    """A warning per owner whose batch-cpu is above 0 and under 100 milli-cores: "2" is usually
    meant as 2 cores. Stated as a fact, not a guess: a conversion of ``cpu: 50m`` writes "50" too."""
    warnings: list[str] = []
    for owner, field, _, _, values in lists:
        raw = values.get(BATCH_CPU, _ABSENT)
        if raw is _ABSENT or field == OVERHEAD:
            continue
        try:
            q = parse_quantity(raw)
        except QuantityError:
            continue
        if 0 < q < SMALL_BATCH_CPU and is_whole(q):
            n = int(q)
            text = (f'{owner}: batch-cpu "{shown(raw)}" is {n} milli-core{"s" if n > 1 else ""}, '
                    f'under a tenth of a core; for {n} core{"s" if n > 1 else ""} write {n}k')
            if text not in warnings:  # requests and limits usually say the same
                warnings.append(text)
    return warnings


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
