"""LimitRanges a batch pod cannot meet: refused here, before LimitRanger refuses the pod after the webhooks.

A LimitRange with a ``min``, ``max`` or ``maxLimitRequestRatio`` on cpu or memory needs every container (or, for
``type: Pod``, the pod) to name that request or limit. A pod holding ``kubernetes.io/batch-cpu``/``batch-memory``
(converted by this chain, or written so) names none, so LimitRanger's validation would refuse it with texts that
speak of resources its user did write. The mutating chain is the last place to say so first (LimitRanger
validates before the validating webhooks are called), with the LimitRange named and the way out. Defaults are
no such constraint: the batch conversion removes what LimitRanger puts back (``domain.batch_resources``).
"""

from __future__ import annotations

from webhook.admission.context import MutatingContext
from webhook.admission.domain.limit_ranges import unmet_constraints
from webhook.admission.response import Denial, forbidden
from webhook.admission.review import AdmissionRequest
from webhook.core.resources import names_batch, resource_lists

NAME = "limit-ranges"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def admit(ctx: MutatingContext) -> Denial | None:
    ns = ctx.namespace
    ranges = ctx.state.limit_ranges(ns)
    if not ranges:   # most namespaces: one dict lookup on the hot path
        if ctx.explain is not None:
            ctx.note(NAME, f"no LimitRange in {ns}")
        return None
    spec = ctx.pod.get("spec")
    if not names_batch(resource_lists(spec if isinstance(spec, dict) else {})):
        ctx.note(NAME, "the pod holds no batch resources: LimitRanger's own checks apply as ever")
        return None
    for lr in ranges:
        unmet = unmet_constraints(ctx.pod, lr)
        if unmet:
            name = (lr.get("metadata") or {}).get("name", "")
            text = unmet[0] if len(unmet) == 1 else "[" + ", ".join(unmet) + "]"
            return forbidden(ctx.pod_name, (
                f"{text} (LimitRange {name} in namespace {ns} constrains cpu or memory, which a pod with "
                "kubernetes.io/batch-cpu/batch-memory does not name, so LimitRanger would refuse it after the "
                "webhooks: remove min, max and maxLimitRequestRatio on cpu and memory from that LimitRange "
                "(default and defaultRequest are fine), or keep the namespace out of the profile's "
                "namespaceSelector)"))
    if ctx.explain is not None:
        ctx.note(NAME, f"LimitRanges in {ns}: {len(ranges)}; none constrains cpu or memory")
    return None
