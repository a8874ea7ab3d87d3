"""The batch-mixing rule's check (pure, no I/O): a pod asks either for batch resources or for native cpu and
memory, never both, and names its batch resources in one protocol (Koordinator's or the legacy
ack-slo-manager's).
"""

from __future__ import annotations

from webhook.core.resources import (
    BATCH_NAMES,
    LEGACY_BATCH,
    NATIVE_RESOURCES,
    OVERHEAD,
    POD_LEVEL_OWNER,
    ResourceList,
    asks,
)

MIXING_ADVICE = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
                 "or native cpu and memory, not both")
POD_LEVEL_ADVICE = ("remove cpu and memory from spec.resources and write them in the containers as "
                    "kubernetes.io/batch-cpu and batch-memory (the apiserver takes no batch resource at pod level)")
PROTOCOL_ADVICE = ("a pod names its batch resources in one protocol: kubernetes.io/batch-cpu and batch-memory "
                   "(Koordinator) or the legacy alibabacloud.com/reclaimed-cpu and reclaimed-memory, not both")


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
