"""PriorityClass quota presence: the ResourceQuota plugin's ``limitedResources`` check, earlier.

With ``--quota-config``, a pod that falls under a configured ``matchScopes`` entry needs a quota in
its namespace with a scope of that name that matches it, and every usage name caught by
``matchContains`` needs a quota tracking it (``core.quota.check_presence``). Denied with 403 and
upstream's text (upstream answers the scope case with 500; docs/admission-rules-validating.md, "PriorityClass quota
presence").
"""

from __future__ import annotations

from webhook.admission.context import ValidatingContext
from webhook.admission.domain.quota_presence import check_presence, format_scopes
from webhook.admission.response import Denial, denied
from webhook.admission.review import AdmissionRequest

NAME = "quota-presence"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def validate(ctx: ValidatingContext) -> Denial | None:
    limited = ctx.settings.limited_resources
    if not limited:
        ctx.note(NAME, "no limitedResources configured (--quota-config): nothing to check")
        return None
    ns = ctx.namespace
    quotas = ctx.state.resource_quotas(ns)
    result = check_presence(ctx.pod, limited, quotas)
    klass = (ctx.pod.get("spec") or {}).get("priorityClassName") or "<none>"
    ctx.note(NAME, f"priorityClassName {klass}: limited scopes {format_scopes(result.limited_scopes)}, "
                   f"limited resources [{','.join(result.limited_names)}]")
    ctx.note(NAME, f"quotas in {ns}: {len(quotas)}; with a matching scope: "
                   f"{', '.join(result.covering_quotas) or 'none'}; tracking this pod: "
                   f"{', '.join(result.tracking_quotas) or 'none'}")
    if result.error is not None:
        return denied(result.error)
    if result.limited_scopes or result.limited_names:
        ctx.audit(NAME, f"covered in {ns} by {', '.join(sorted(set(result.covering_quotas + result.tracking_quotas)))}")
        ctx.note(NAME, "covered: allowed")
    else:
        ctx.note(NAME, "pod matches no limited scope or resource: allowed")
    return None
