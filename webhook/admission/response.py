"""The answer vocabulary: a rule returns a Decision built by one of these constructors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WARNING_LIMIT = 120  # apiserver guidance: keep each warning under 120 characters


@dataclass(slots=True)
class Decision:
    allowed: bool = True
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    rule: str = ""  # the rule that denied, for metrics and --explain

    def warn(self, text: str) -> None:
        if len(text) >= WARNING_LIMIT:
            text = text[: WARNING_LIMIT - 2] + "…"
        if text not in self.warnings:
            self.warnings.append(text)


def allowed() -> Decision:
    return Decision()


def patched(ops: list[dict[str, Any]]) -> Decision:
    return Decision(patch=ops)


def denied(message: str, rule: str = "", code: int = 403, reason: str = "Forbidden") -> Decision:
    return Decision(allowed=False, code=code, reason=reason, message=message, rule=rule)


def forbidden(name: str, message: str, rule: str = "", resource: str = "pods") -> Decision:
    """403 in the in-tree plugins' wording (admission.NewForbidden): ``pods "<name>" is forbidden: ...``."""
    return denied(f'{resource} "{name}" is forbidden: {message}', rule=rule)


def errored(code: int, message: str, rule: str = "") -> Decision:
    reason = {400: "BadRequest", 500: "InternalError"}.get(code, "")
    return Decision(allowed=False, code=code, reason=reason, message=message, rule=rule)


def chain_outcome(mutation: Decision, validation: Decision) -> Decision:
    """What the apiserver makes of a mutating answer followed by a validating one, as one answer.

    A denial by either step stops the request (the mutating patch is then never applied, so none is
    carried); the warnings and audit annotations of both steps reach the client either way.
    """
    last = mutation if not mutation.allowed else validation
    out = Decision(allowed=last.allowed, code=last.code, reason=last.reason, message=last.message, rule=last.rule,
                   patch=list(mutation.patch) if last.allowed else [])
    for w in mutation.warnings + (validation.warnings if mutation.allowed else []):
        out.warn(w)
    out.audit_annotations = {**mutation.audit_annotations,
                             **(validation.audit_annotations if mutation.allowed else {})}
    return out
