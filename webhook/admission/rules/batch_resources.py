"""Batch resources: a koord-batch (5000-5999) pod asks for batch-cpu/batch-memory instead of cpu/memory,
a koord-mid (7000-7999) pod for mid-cpu/mid-memory (koordinator.md §2.5), whether or not a profile
matched, unless a matched profile carries ``config.koordinator.sh/skip-update-resources``. Then the
``node.koordinator.sh/extended-resource-spec`` annotation is written as Koordinator does (§2.6).
"""

from __future__ import annotations

from webhook.admission.context import MutatingContext
from webhook.admission.response import Denial
from webhook.admission.review import AdmissionRequest
from webhook.core.batch_resources import (
    EXTENDED_RESOURCE_SPEC,
    convert_pod,
    encode_extended_resource_spec,
    extended_resource_spec,
    same_extended_resource_spec,
    targets_for,
)
from webhook.core.priority import band_of
from webhook.core.qos import koord_qos_class
from webhook.core.resources import CPU, MEMORY, iter_containers

NAME = "batch-resources"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def admit(ctx: MutatingContext) -> Denial | None:
    spec = ctx.pod.get("spec")
    if not isinstance(spec, dict):
        return None
    priority = ctx.facts.priority if ctx.facts.priority is not None else spec.get("priority")
    targets = targets_for(priority)
    qos = koord_qos_class(ctx.pod)  # the label, or the legacy alibabacloud.com/qosClass annotation
    if targets is None:
        ctx.note(NAME, f"priority {priority} is not in the koord-batch or koord-mid band: no conversion")
        if qos == "BE" and _asks_native(spec):
            ctx.warn(f"QoS BE pod with priority {priority} keeps cpu/memory; use priorityClassName "
                              "koord-batch to get batch resources")
    elif ctx.facts.skip_update_resources:
        ctx.note(NAME, f"skipped: a matched profile ({', '.join(ctx.facts.matched_profiles)}) has "
                       "config.koordinator.sh/skip-update-resources")
    else:
        _convert(ctx, spec, priority, targets)
    _write_spec_annotation(ctx)
    return None


def _asks_native(spec: dict) -> bool:  # type: ignore[type-arg]
    for _, _, c in iter_containers(spec):
        res = c.get("resources")
        if not isinstance(res, dict):  # malformed: the validating rules report it
            continue
        for kind in ("requests", "limits"):
            values = res.get(kind)
            if isinstance(values, dict) and (CPU in values or MEMORY in values):
                return True
    return False


def _convert(ctx, spec: dict, priority: int, targets: tuple[str, str]) -> None:  # type: ignore[no-untyped-def, type-arg]
    changes = convert_pod(spec, *targets)
    band = band_of(priority)
    if not changes:
        ctx.note(NAME, f"{band} (priority {priority}): nothing to convert")
        return
    where = []
    for path, new, _done in changes:
        # One explicit op per converted ResourceList (the whole list replaced): the same change as
        # remove-cpu/add-batch-cpu pairs, in a quarter of the ops.
        # convert_list builds these maps afresh (sharing nothing with the pod): no copy for the ops.
        if path[-1] == "overhead":
            ctx.patch.set(path, new, fresh=True)
        else:
            ctx.patch.set_keys(path, new, ("requests", "limits"), fresh=True)
        where.append(_where(spec, path))  # names only: ``spec`` may be the pod before these writes
    cpu_name, mem_name = targets
    summary = f"cpu/memory -> {cpu_name}/{mem_name.rsplit('/', 1)[-1]} ({band} {priority}) in {', '.join(where)}"
    ctx.audit(NAME, summary)
    ctx.warn(f"converted cpu/memory to {cpu_name}/{mem_name.rsplit('/', 1)[-1]} in {len(where)} "
                      f"place(s) ({band} priority {priority})")
    if ctx.explain is not None:
        for text, (_path, _new, done) in zip(where, changes):
            ctx.note(NAME, f"{text}: converted {', '.join(done)}")


def _where(spec: dict, path: tuple) -> str:  # type: ignore[type-arg]
    if path == ("spec", "overhead"):
        return "overhead"
    field, index = path[1], path[2]
    name = spec[field][index].get("name") or f"#{index}"
    return f"init container {name}" if field == "initContainers" else f"container {name}"


def _write_spec_annotation(ctx) -> None:  # type: ignore[no-untyped-def]
    spec = ctx.pod.get("spec") or {}
    wanted = extended_resource_spec(spec)
    annotations = (ctx.pod.get("metadata") or {}).get("annotations") or {}
    # Written only when the content changes (Koordinator compares the parsed values).
    if same_extended_resource_spec(annotations.get(EXTENDED_RESOURCE_SPEC), wanted):
        return
    text = encode_extended_resource_spec(wanted)
    ctx.patch.set(("metadata", "annotations", EXTENDED_RESOURCE_SPEC), text)
    if ctx.explain is not None:
        ctx.note(NAME, f"annotation {EXTENDED_RESOURCE_SPEC}={text}")
