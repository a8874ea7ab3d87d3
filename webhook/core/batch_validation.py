"""Checks on how a pod writes batch resources (the validating batch rules; pure, no I/O).

Seed 003: a pod must not ask for batch resources and native cpu/memory together, batch-cpu counts
milli-cores as a whole number ("1k" is one core) and batch-memory whole bytes.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from webhook.core.fielderrors import invalid
from webhook.core.quantity import QuantityError, is_whole, parse_quantity
from webhook.core.resources import BATCH_CPU, BATCH_RESOURCES, NATIVE_RESOURCES, iter_resource_lists

MIXING_ADVICE = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
                 "or native cpu and memory, not both")
BATCH_CPU_WHOLE = ("kubernetes.io/batch-cpu counts milli-cores and must be a whole number: "
                   "write 500 for half a core, 1k or 1000 for one core")
BATCH_MEMORY_WHOLE = ("kubernetes.io/batch-memory counts bytes and must be a whole number: "
                      "write 512Mi or 536870912 for half a gibibyte")
NEGATIVE = "must be greater than or equal to 0"  # upstream ValidateNonnegativeQuantity
SMALL_BATCH_CPU = 100  # below a tenth of a core: almost certainly meant as cores


def _asks(raw: object) -> bool:
    """A quantity above zero asks for the resource; an unparsable one counts (reported elsewhere)."""
    try:
        return parse_quantity(raw) > 0
    except QuantityError:
        return True


def mixing_error(spec: dict[str, Any]) -> str | None:
    """The denial text when ``spec`` asks for batch and native cpu/memory together, else None."""
    batch: dict[str, list[str]] = {}   # owner -> names asked for, in spec order
    native: dict[str, list[str]] = {}
    for owner, _, _, values in iter_resource_lists(spec):
        for name, raw in values.items():
            bucket = batch if name in BATCH_RESOURCES else native if name in NATIVE_RESOURCES else None
            if bucket is not None and _asks(raw):
                names = bucket.setdefault(owner, [])
                if name not in names:
                    names.append(name)
    if not batch or not native:
        return None
    for owner, names in batch.items():  # one owner asking for both reads best
        if owner in native:
            return f"{owner} asks for both {names[0]} and {native[owner][0]}: {MIXING_ADVICE}"
    b_owner, b_names = next(iter(batch.items()))
    n_owner, n_names = next(iter(native.items()))
    return f"{b_owner} asks for {b_names[0]} and {n_owner} asks for {n_names[0]}: {MIXING_ADVICE}"


def _shown(raw: object) -> str:
    return raw if isinstance(raw, str) else str(raw)


def unit_problems(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for the batch-cpu and batch-memory quantities of ``spec``.

    Errors are upstream ``field.Error`` texts with the field path; warnings stay under 120 chars.
    """
    errors: list[str] = []
    warnings: list[str] = []
    given: dict[tuple[str, str], dict[str, tuple[object, Decimal]]] = {}  # (resources path, name) -> kind -> value
    for owner, path, kind, values in iter_resource_lists(spec):
        for name in BATCH_RESOURCES:
            if name not in values:
                continue
            raw = values[name]
            where = f"{path}[{name}]"
            try:
                q = parse_quantity(raw)
            except QuantityError as exc:
                errors.append(invalid(where, _shown(raw), str(exc)))
                continue
            if q < 0:
                errors.append(invalid(where, _shown(raw), NEGATIVE))
                continue
            if not is_whole(q):
                errors.append(invalid(where, _shown(raw), BATCH_CPU_WHOLE if name == BATCH_CPU else BATCH_MEMORY_WHOLE))
                continue
            if name == BATCH_CPU and 0 < q < SMALL_BATCH_CPU:
                text = (f'{owner}: batch-cpu "{_shown(raw)}" is {int(q)} milli-cores, under a tenth '
                        f"of a core; did you mean {int(q)}k?")
                if text not in warnings:  # requests and limits usually say the same
                    warnings.append(text)
            given.setdefault((path.rpartition(".")[0], name), {})[kind] = (raw, q)
    # A request may not exceed its limit. kubernetes.io/batch-* are prefixed native resources, which
    # the apiserver lets a pod overcommit (request <= limit, upstream's text, kubernetes.md §5.3), and
    # Koordinator's own conversion of a Burstable pod (500m/1 -> 500/1000) relies on it: demanding
    # request == limit would deny the mutating chain's own output.
    for (base, name), kinds in given.items():
        if "requests" in kinds and "limits" in kinds and kinds["requests"][1] > kinds["limits"][1]:
            errors.append(invalid(f"{base}.requests", _shown(kinds["requests"][0]),
                                  f"must be less than or equal to {name} limit of {_shown(kinds['limits'][0])}"))
    return errors, warnings
