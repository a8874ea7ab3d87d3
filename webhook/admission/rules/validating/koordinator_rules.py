"""Koordinator's pod validating rules, word for word (``pkg/webhook/pod/validating/cluster_colocation_profile.go``).

Batch resources need QoS BE; BE must not run as koord-prod or without a class; LSR must be
koord-prod; LSR/LSE request whole cpus; on UPDATE the QoS class, the priority class and the
``koordinator.sh/priority`` label are immutable. All errors are reported together, as upstream.
On UPDATE the pod checks refuse only what the update brings (``ctx.judge``, ``domain.ratchet``); the
immutable fields are refused always.
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.koordinator_rules import immutable_errors, pod_errors
from webhook.admission.response import Denial, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.fielderrors import aggregate
from webhook.core.priority import koord_priority_class
from webhook.core.qos import koord_qos_class

NAME = "koordinator-rules"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def findings(ctx: ValidatingContext) -> list[str]:
    return pod_errors(ctx.pod)


def validate(ctx: ValidatingContext) -> Denial | None:
    immutable = (immutable_errors(ctx.old_pod, ctx.pod)
                 if ctx.request.operation == "UPDATE" and isinstance(ctx.old_pod, dict) else [])
    errors = ctx.judge(NAME, findings, always=immutable).refused
    if errors:
        return denied(aggregate(errors))
    if ctx.explain is not None:
        ctx.note(NAME, f"qosClass={koord_qos_class(ctx.pod) or '<none>'}, "
                       f"priorityClass={koord_priority_class(ctx.pod) or '<none>'}: allowed"
                       + (" (QoS class, priority class and sub-priority unchanged)"
                          if ctx.request.operation == "UPDATE" else ""))
    return None
