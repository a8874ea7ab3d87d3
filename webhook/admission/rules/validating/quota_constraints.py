"""Quota constraints: refuse, with a way out, a pod that a ResourceQuota's constraints would refuse next.

A quota on cpu, memory, ``requests.*`` or ``limits.*`` whose scopes match the pod makes every container and init
container name that resource (the pod evaluator's ``Constraints``, ``pkg/quota/v1/evaluator/core/pods.go``). A pod
the batch conversion moved to ``kubernetes.io/batch-cpu``/``batch-memory`` names none of them, and the apiserver
refuses it after the webhooks with ``failed quota: compute: must specify limits.cpu ...``, naming resources the user
did write (Koordinator issues 1676, 2385). The scopes are read on the pod as it is now: converted, it has no cpu or
memory, so it is BestEffort and ``NotBestEffort`` quotas do not match it; a PriorityClass scope sees the class a
profile set. The denial carries the apiserver's own text, and where the pod holds batch resources, why and the ways
out that work (a quota on ``requests.kubernetes.io/batch-cpu`` is none: the evaluator charges no ``kubernetes.io/``
resource). The apiserver would refuse every other such pod with that same text; this rule says it first.
"""

from __future__ import annotations

from typing import Any

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.quota import quota_scope_selectors
from webhook.admission.domain.quota_constraints import constraints_text, refusing_quota
from webhook.admission.response import Denial, forbidden
from webhook.admission.review import AdmissionRequest
from webhook.core.qos import kube_qos_class
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, as_object, names_batch

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
        # NotBestEffort takes the quota off a BestEffort pod, unless the quota is scoped BestEffort itself (the
        # apiserver refuses that scope on compute resources; a hand-written file may still hold one).
        scopes = {s.get("scopeName") for qo in quotas if _name(qo) == quota for s in quota_scope_selectors(qo)}
        message += _advice(quota, ns, list(missing),
                                kube_qos_class(ctx.pod) == "BestEffort" and "BestEffort" not in scopes)
    return forbidden(ctx.pod_name, message)


def _name(quota: dict[str, Any]) -> str:
    return str(as_object(quota.get("metadata")).get("name", ""))


def _advice(quota: str, ns: str, missing: list[str], not_best_effort_helps: bool) -> str:
    """Why a batch pod cannot meet the quota, and only ways out the apiserver honours: its quota evaluator charges
    no ``kubernetes.io/`` resource (batch-cpu is native by name), so a quota on ``requests.kubernetes.io/batch-cpu``
    is accepted and never counts anything; a ``NotBestEffort`` scope stops the quota matching a BestEffort pod."""
    way_out = ("add the scope NotBestEffort to that quota (this pod is BestEffort, so the quota then leaves it "
               "alone) or " if not_best_effort_helps else "")
    return (f" (this pod asks for {BATCH_CPU}/{BATCH_MEMORY} instead of cpu/memory, as a colocation profile's batch "
            f"conversion writes them; quota {quota} in namespace {ns} constrains {', '.join(missing)}, which a batch "
            "pod cannot set, and a ResourceQuota charges no kubernetes.io/ resource in their place: "
            f"{way_out}keep the namespace out of the profile's namespaceSelector)")
