"""Batch resources: a koord-batch (5000-5999) pod asks for batch-cpu/batch-memory instead of cpu/memory,
a koord-mid (7000-7999) pod for mid-cpu/mid-memory (Koordinator's ``mutatePodResourceSpec``), whether or not a profile
matched, unless a matched profile carries ``config.koordinator.sh/skip-update-resources``. Then the
``node.koordinator.sh/extended-resource-spec`` annotation is written as Koordinator does
(``pkg/webhook/pod/mutating/extended_resource_spec.go``).

Where we add to Koordinator: a pod holding a value that is no quantity is denied before anything
is converted; a container whose value of the band's resources a conversion would overwrite with
another one is left as it is; a converted koord-batch pod that states no QoS class gets
``koordinator.sh/qosClass: BE``, without which Koordinator's own rule denies it; odd cpu values
(memory units, fractions of a milli-core) and a batch-cpu under 100 get a warning.
"""

from __future__ import annotations

from typing import Any

from webhook.admission.context import MutatingContext
from webhook.admission.domain.batch_resources import (
    SHORT_NAMES,
    Path,
    conversion_notes,
    convert_pod,
    fold_pod_level,
    hugepages_text,
    limit_ranger_defaults,
    small_batch_cpu_warnings,
    targets_for,
)
from webhook.admission.response import Denial, bad_request, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.extended_resource_spec import (
    EXTENDED_RESOURCE_SPEC,
    encode_extended_resource_spec,
    extended_resource_spec,
    same_extended_resource_spec,
)
from webhook.core.fielderrors import aggregate
from webhook.core.priority import band_of
from webhook.core.qos import (
    BAND_QOS_CLASS,
    QOS_LABEL,
    koord_qos_class,
    states_qos_class,
)
from webhook.core.resources import (
    CPU,
    MEMORY,
    POD_LEVEL_OWNER,
    ResourceList,
    iter_containers,
    quantity_errors,
    resource_lists,
    shown,
)

NAME = "batch-resources"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def admit(ctx: MutatingContext) -> Denial | None:
    spec = ctx.pod.get("spec")
    if not isinstance(spec, dict):
        return None
    lists = resource_lists(spec)
    bad = quantity_errors(lists)
    if bad:  # converting the rest would hand back a half-converted pod the validating rules misread
        return bad_request(aggregate(bad))  # the chain notes the denial for --explain
    # What the user wrote: a container asking for batch-cpu is never converted below, and the
    # owners an earlier pass converted are left out.
    converted = ctx.facts.converted
    for text in small_batch_cpu_warnings([e for e in lists if (e[1], e[2]) not in converted] if converted else lists):
        ctx.warn(text)
        ctx.note(NAME, f"warning: {text}")
    priority = ctx.facts.priority if ctx.facts.priority is not None else spec.get("priority")
    targets = targets_for(priority)  # None unless priority is an int of a band
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
        assert isinstance(priority, int)  # targets_for found a band for it
        denial = _convert(ctx, spec, lists, priority, targets)
        if denial is not None:
            return denial
    _write_spec_annotation(ctx)
    return None


def _asks_native(spec: dict[str, Any]) -> bool:
    level = spec.get("resources")
    if isinstance(level, dict) and any(isinstance(v, dict) and (CPU in v or MEMORY in v) for v in level.values()):
        return True
    for _, _, c in iter_containers(spec):
        res = c.get("resources")
        if not isinstance(res, dict):  # malformed: the validating rules report it
            continue
        for kind in ("requests", "limits"):
            values = res.get(kind)
            if isinstance(values, dict) and (CPU in values or MEMORY in values):
                return True
    return False


def _convert(ctx: MutatingContext, spec: dict[str, Any], lists: list[ResourceList], priority: int,
             targets: tuple[str, str]) -> Denial | None:
    defaulted = limit_ranger_defaults((ctx.pod.get("metadata") or {}).get("annotations"))
    # Pod-level cpu/memory (spec.resources): moved into the containers or dropped where exact, else refused.
    folded = fold_pod_level(spec, *targets) if "resources" in spec else None
    if isinstance(folded, str):
        ctx.note(NAME, folded)
        return denied(folded)
    changes, skipped, alone = convert_pod(spec if folded is None else folded[0], *targets, defaulted)
    if folded is not None:
        if skipped:  # a container keeps its cpu next to its batch value: so does the pod; the validating chain says
            changes, skipped, alone = convert_pod(spec, *targets, defaulted)
        else:
            changes.append((("spec", "resources"), folded[1], folded[2]))
    band = band_of(priority)
    cpu_name, mem_name = targets
    for path, name, value in skipped:
        text = f'{_owner(spec, path)} already asks for {name} "{shown(value)}": its cpu/memory are not converted'
        ctx.warn(text)
        ctx.note(NAME, text)
    if not changes:
        ctx.note(NAME, f"{band} (priority {priority}): nothing to convert")
        return None
    if alone:  # the apiserver would refuse the converted container: say so first, with the way out
        path, pages = alone[0]
        text = hugepages_text(f"spec.{path[1]}[{path[2]}].resources", pages, cpu_name, mem_name)
        ctx.note(NAME, text)
        return denied(text)
    # Texts from the pod as it came, before the writes below.
    owners: set[tuple[str, int]] = {(str(p[1]), int(p[2])) if len(p) == 4 else ("resources", 0)
                                    for p, _, _ in changes}
    ctx.facts.converted.update(owners)
    notes = conversion_notes(lists, owners, cpu_name, mem_name)
    where = [_owner(spec, path) for path, _new, _done in changes]
    for path, new, _done in changes:
        # One explicit op per converted container (its whole resources replaced) or the pod level: the same
        # change as remove-cpu/add-batch-cpu pairs, in an eighth of the ops.
        if new is None:
            ctx.patch.remove(path)   # spec.resources held only cpu/memory
        else:
            ctx.patch.set(path, new)
    qos = BAND_QOS_CLASS.get(band)
    set_qos = qos is not None and not states_qos_class(ctx.pod)
    if set_qos:
        ctx.patch.set(("metadata", "labels", QOS_LABEL), qos)
        if QOS_LABEL in ctx.facts.profile_label_keys:
            # A profile reads the label: the chain runs again so its answer stays its own fixpoint.
            ctx.rerun(f"{NAME} set {QOS_LABEL}={qos}")
    label = f"; set {QOS_LABEL}={qos}" if set_qos else ""
    ctx.audit(NAME, f"cpu/memory -> {cpu_name}/{SHORT_NAMES[mem_name]} ({band} {priority}) in "
                    f"{', '.join(where)}{label}")
    ctx.warn(f"converted cpu/memory to {SHORT_NAMES[cpu_name]}/{SHORT_NAMES[mem_name]} in {len(where)} place(s) "
             f"({band} {priority}){label}")  # short names: the warning stays under 120 characters
    for text in notes:
        ctx.warn(text)
    if ctx.explain is not None:
        for text, (_path, _new, done) in zip(where, changes, strict=False):
            ctx.note(NAME, f"{text}: converted {', '.join(done)}")
        if set_qos:
            ctx.note(NAME, f"the pod states no QoS class: {QOS_LABEL}={qos}, the class of {band}")
        for text in notes:
            ctx.note(NAME, f"warning: {text}")
    return None


def _owner(spec: dict[str, Any], path: Path) -> str:
    """``container "app"``, ``init container "setup"`` or ``the pod (spec.resources)``, as the validating rules
    say."""
    if path == ("spec", "resources"):
        return POD_LEVEL_OWNER
    field, index = str(path[1]), int(path[2])
    name = spec[field][index].get("name", "")
    return f'init container "{name}"' if field == "initContainers" else f'container "{name}"'


def _write_spec_annotation(ctx: MutatingContext) -> None:
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
