"""batch-cpu in whole milli-cores, batch-memory in whole bytes, request not above its limit.

A batch-cpu below 100 (a tenth of a core) gets a warning from the mutating batch-resources rule,
which still sees what the user wrote (here a converted ``cpu: 50m`` reads "50" as well).
"""

from __future__ import annotations

from webhook.admission.batch_mixing import FACT_RESOURCE_LISTS
from webhook.admission.response import Decision, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.batch_validation import unit_problems
from webhook.core.fielderrors import aggregate
from webhook.core.resources import resource_lists

NAME = "batch-units"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def validate(ctx) -> Decision | None:  # type: ignore[no-untyped-def]
    spec = ctx.pod.get("spec") or {}
    errors = unit_problems(spec, ctx.memo(FACT_RESOURCE_LISTS, lambda: resource_lists(spec)))
    if errors:
        return denied(aggregate(errors), rule=NAME)
    ctx.note(NAME, "batch-cpu/batch-memory: whole milli-cores and bytes, requests not above limits")
    return None
