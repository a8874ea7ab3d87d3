"""Placeholder: filled in by the admission rules issue."""

from __future__ import annotations

from webhook.admission.response import Decision
from webhook.admission.review import AdmissionRequest

NAME = "quota_presence".replace("_", "-")


def handles(request: AdmissionRequest) -> bool:
    return False


def validate(ctx) -> Decision | None:  # type: ignore[no-untyped-def]
    return None
