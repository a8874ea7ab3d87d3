"""No mixing: a pod asks either for batch resources or for native cpu/memory, never both.

Containers, init containers and ``spec.overhead`` all count (``core.batch_validation.mixing_error``). As the
first validating rule it also answers 400 for a pod whose outline is malformed or that holds a value
that is no quantity (what the apiserver's decoder refuses), so the rules after it can trust both.
"""

from __future__ import annotations

from webhook.admission.response import Decision, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.batch_validation import mixing_error
from webhook.core.fielderrors import aggregate
from webhook.core.resources import pod_shape_error, quantity_errors, resource_lists

NAME = "batch-mixing"
FACT_RESOURCE_LISTS = "resource_lists"  # core.resources.resource_lists of the pod, shared with batch-units


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def validate(ctx) -> Decision | None:  # type: ignore[no-untyped-def]
    shape = pod_shape_error(ctx.pod)
    if shape is None and ctx.request.operation == "UPDATE" and ctx.old_pod is not None:
        old = pod_shape_error(ctx.old_pod)
        shape = None if old is None else f"oldObject.{old}"
    if shape is not None:
        return denied(shape, rule=NAME, code=400, reason="BadRequest")
    spec = ctx.pod["spec"]
    lists = ctx.memo(FACT_RESOURCE_LISTS, lambda: resource_lists(spec))
    bad = quantity_errors(spec, lists)
    if bad:
        return denied(aggregate(bad), rule=NAME, code=400, reason="BadRequest")
    message = mixing_error(spec, lists)
    if message is not None:
        return denied(message, rule=NAME)
    ctx.note(NAME, "containers, init containers and overhead: batch and native cpu/memory not mixed")
    return None
