"""No mixing: a pod asks either for batch resources or for native cpu/memory, never both.

Containers, init containers and ``spec.overhead`` all count (``core.batch_validation.mixing_error``). As the
first validating rule it also answers 400 for a pod whose outline is malformed, so the rules after
it can trust the shape.
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.response import Denial, bad_request, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.batch_validation import mixing_error
from webhook.core.resources import pod_shape_error

NAME = "batch-mixing"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def validate(ctx: ValidatingContext) -> Denial | None:
    shape = pod_shape_error(ctx.pod)
    if shape is None and ctx.request.operation == "UPDATE" and ctx.old_pod is not None:
        old = pod_shape_error(ctx.old_pod)
        shape = None if old is None else f"oldObject.{old}"
    if shape is not None:
        return bad_request(shape)
    spec = ctx.pod["spec"]
    message = mixing_error(spec, ctx.resource_lists)
    if message is not None:
        return denied(message)
    ctx.note(NAME, "containers, init containers and overhead: batch and native cpu/memory not mixed")
    return None
