"""No mixing: a pod asks either for batch resources or for native cpu/memory, never both.

Containers, init containers and ``spec.overhead`` all count (``core.batch.mixing_error``).
"""

from __future__ import annotations

from webhook.admission.response import Decision, denied
from webhook.admission.review import AdmissionRequest
from webhook.core.batch import mixing_error

NAME = "batch-mixing"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation in ("CREATE", "UPDATE")


def validate(ctx) -> Decision | None:  # type: ignore[no-untyped-def]
    message = mixing_error(ctx.pod.get("spec") or {})
    if message is not None:
        return denied(message, rule=NAME)
    ctx.note(NAME, "containers, init containers and overhead: batch and native cpu/memory not mixed")
    return None
