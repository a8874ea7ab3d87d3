"""No mixing: a pod asks either for batch resources or for native cpu/memory, never both.

Containers, init containers and the pod-level ``spec.resources`` count; ``spec.overhead`` (the RuntimeClass's)
does not (``domain.batch_mixing.mixing_error``). As the
first validating rule it also answers 400 for a pod whose outline is malformed or that holds a value
that is no quantity (what the apiserver's decoder refuses), so the rules after it can trust both. On UPDATE only
a mix the update brings is refused (``ctx.judge``, ``domain.ratchet``); the 400s stand, as the apiserver could
never have stored such an object.
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.batch_mixing import mixing_error
from webhook.admission.response import Denial, bad_request, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.fielderrors import aggregate
from webhook.core.resources import quantity_errors, review_shape_error

NAME = "batch-mixing"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def findings(ctx: ValidatingContext) -> list[str]:
    message = mixing_error(ctx.resource_lists)
    return [] if message is None else [message]


def validate(ctx: ValidatingContext) -> Denial | None:
    shape = review_shape_error(ctx.pod, ctx.old_pod if ctx.request.operation == "UPDATE" else None)
    if shape is not None:
        return bad_request(shape)
    lists = ctx.resource_lists
    bad = quantity_errors(lists)
    if bad:
        return bad_request(aggregate(bad))
    verdict = ctx.judge(NAME, findings)
    if verdict.refused:
        return denied(aggregate(verdict.refused))
    if not verdict.carried:
        ctx.note(NAME, "containers, init containers and pod-level resources: batch and native cpu/memory not mixed")
    return None
