"""No mixing: a pod asks either for batch resources or for native cpu/memory, never both.

Containers, init containers and ``spec.overhead`` all count (``core.batch_validation.mixing_error``). As the
first validating rule it also answers 400 for a pod whose outline is malformed or that holds a value
that is no quantity (what the apiserver's decoder refuses), so the rules after it can trust both.
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.batch_validation import mixing_error
from webhook.admission.response import Denial, bad_request, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.fielderrors import aggregate
from webhook.core.resources import quantity_errors, review_shape_error

NAME = "batch-mixing"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def validate(ctx: ValidatingContext) -> Denial | None:
    shape = review_shape_error(ctx.pod, ctx.old_pod if ctx.request.operation == "UPDATE" else None)
    if shape is not None:
        return bad_request(shape)
    lists = ctx.resource_lists
    bad = quantity_errors(lists)
    if bad:
        return bad_request(aggregate(bad))
    message = mixing_error(lists)
    if message is not None:
        return denied(message)
    ctx.note(NAME, "containers, init containers and overhead: batch and native cpu/memory not mixed")
    return None
