"""Quota constraints: refuse, with a way out, a pod that a ResourceQuota's constraints would refuse next.

A quota on cpu, memory, ``requests.*`` or ``limits.*`` whose scopes match the pod makes every container and init
container name that resource (the pod evaluator's ``Constraints``; kubernetes.md §2.4 step 4). A pod the batch
conversion moved to ``kubernetes.io/batch-cpu``/``batch-memory`` names none of them, and the apiserver refuses it
after the webhooks with ``failed quota: compute: must specify limits.cpu ...``, naming resources the user did
write (Koordinator issues 1676, 2385). The scopes are read on the pod as it is now: converted, it has no cpu or
memory, so it is BestEffort and ``NotBestEffort`` quotas do not match it; a PriorityClass scope sees the class a
profile set. The denial carries the apiserver's own text, and where the pod holds batch resources, why and the
ways out. The apiserver would refuse every other such pod with that same text; this rule says it first.
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.quota import constraints_text, refusing_quota
from webhook.admission.response import Denial, forbidden
from webhook.admission.review import AdmissionRequest
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, names_batch

NAME = "quota-constraints"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def validate(ctx: ValidatingContext) -> Denial | None:
    ns = ctx.namespace
    quotas = ctx.state.resource_quotas(ns)
    found = refusing_quota(ctx.pod, quotas) if quotas else None
    if found is None:
        if ctx.explain is not None:
            ctx.note(NAME, f"quotas in {ns}: {len(quotas)}; none that matches this pod asks for what it does not set")
        return None
    quota, missing = found
    message = f"failed quota: {quota}: {constraints_text(missing)}"
    if names_batch(ctx.resource_lists):
        message += (f" (this pod asks for {BATCH_CPU}/{BATCH_MEMORY} instead of cpu/memory, as a colocation "
                    f"profile's batch conversion writes them; quota {quota} in namespace {ns} constrains "
                    f"{', '.join(missing)}, which a batch pod cannot set: constrain requests.{BATCH_CPU} and "
                    f"requests.{BATCH_MEMORY} in that quota instead, scope it away from batch pods, or keep the "
                    "namespace out of the profile's namespaceSelector)")
    return forbidden(ctx.pod_name, message)
