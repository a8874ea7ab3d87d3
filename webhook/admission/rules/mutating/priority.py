"""Priority resolution: the in-tree Priority plugin's CREATE rules
(``plugin/pkg/admission/priority/admission.go``).

``priorityClassName`` becomes ``spec.priority`` and ``spec.preemptionPolicy``; no name means the
globalDefault class (its name written into the pod); a mismatch is denied with upstream's text.
"""

from __future__ import annotations

from webhook.admission.context import MutatingContext
from webhook.admission.response import Denial, bad_request, forbidden
from webhook.admission.review import AdmissionRequest
from webhook.core.priority import resolve_priority

NAME = "priority"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def admit(ctx: MutatingContext) -> Denial | None:
    spec = ctx.pod.get("spec")
    if not isinstance(spec, dict):
        return bad_request("spec: Required value: a pod needs a spec")
    state = ctx.state
    res = resolve_priority(spec, state.priority_class, state.default_priority_class())
    if res.error:  # the chain notes the denial for --explain
        return forbidden(ctx.pod_name, res.error)
    changed = False
    if res.class_name and spec.get("priorityClassName") != res.class_name:
        changed |= ctx.patch.set(("spec", "priorityClassName"), res.class_name)
    changed |= ctx.patch.set(("spec", "priority"), res.priority)
    changed |= ctx.patch.set(("spec", "preemptionPolicy"), res.preemption_policy)
    ctx.facts.priority = res.priority
    if changed:
        summary = f"{res.class_name or '<none>'}: priority {res.priority}, {res.preemption_policy}"
        ctx.audit(NAME, summary)
        ctx.note(NAME, f"resolved {summary}")
    elif ctx.explain is not None:
        ctx.note(NAME, f"already resolved: {res.class_name or '<none>'} = {res.priority}")
    return None
