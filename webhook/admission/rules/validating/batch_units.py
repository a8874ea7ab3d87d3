"""batch-cpu in whole milli-cores, batch-memory in whole bytes, request not above its limit.

A batch-cpu below 100 (a tenth of a core) gets a warning from the mutating batch-resources rule,
which still sees what the user wrote (here a converted ``cpu: 50m`` reads "50" as well). On UPDATE only what the
update brings is refused (``ctx.judge``, ``domain.ratchet``).
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.batch_units import unit_problems
from webhook.admission.response import Denial, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.fielderrors import aggregate

NAME = "batch-units"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def findings(ctx: ValidatingContext) -> list[str]:
    return unit_problems(ctx.resource_lists)


def validate(ctx: ValidatingContext) -> Denial | None:
    verdict = ctx.judge(NAME, findings)
    if verdict.refused:
        return denied(aggregate(verdict.refused))
    if not verdict.carried:
        ctx.note(NAME, "batch-cpu/batch-memory: whole milli-cores and bytes, requests not above limits")
    return None
