"""The answer vocabulary: a rule denies with one of these constructors; the chain builds the Decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WARNING_LIMIT = 120  # apiserver guidance: keep each warning under 120 characters


@dataclass(slots=True, frozen=True)
class Denial:
    """A rule's refusal: the status the apiserver shows the client."""

    message: str
    code: int = 403
    reason: str = "Forbidden"


@dataclass(slots=True)
class Decision:
    """The answer to one review: allowed (with a JSONPatch for a mutating review) or denied."""

    allowed: bool = True
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    rule: str = ""  # the rule that denied (or failed), for metrics and --explain
    rule_failed: bool = False  # ``rule`` raised; the answer is what --on-rule-error says
    patch_rules: dict[str, int] = field(default_factory=dict)  # how many of the patch's ops each rule wrote

    @classmethod
    def of(cls, denial: Denial, rule: str, warnings: list[str], audit_annotations: dict[str, str]) -> Decision:
        """A rule's denial as the answer, with what the rules before it said."""
        return cls(allowed=False, code=denial.code, reason=denial.reason, message=denial.message, rule=rule,
                   warnings=warnings, audit_annotations=audit_annotations)


def denied(message: str) -> Denial:
    return Denial(message)


def bad_request(message: str) -> Denial:
    """An object whose shape the rules cannot work with (HTTP 400 in the answer's status)."""
    return Denial(message, 400, "BadRequest")


def forbidden(name: str, message: str, resource: str = "pods") -> Denial:
    """403 in the in-tree plugins' wording (admission.NewForbidden): ``pods "<name>" is forbidden: ...``."""
    return denied(f'{resource} "{name}" is forbidden: {message}')


def errored(code: int, message: str, rule: str = "") -> Decision:
    """A review the webhook could not answer on its merits (400: unusable object, 500: a failure)."""
    reason = {400: "BadRequest", 500: "InternalError"}.get(code, "")
    return Decision(allowed=False, code=code, reason=reason, message=message, rule=rule)


def chain_outcome(mutation: Decision, validation: Decision) -> Decision:
    """What the apiserver makes of a mutating answer followed by a validating one, as one answer.

    A denial by either step stops the request (the mutating patch is then never applied, so none is
    carried); the warnings and audit annotations of both steps reach the client either way.
    """
    last = mutation if not mutation.allowed else validation
    both = [mutation] + ([validation] if mutation.allowed else [])
    warnings = list(dict.fromkeys(w for d in both for w in d.warnings))
    audit = {k: v for d in both for k, v in d.audit_annotations.items()}
    return Decision(allowed=last.allowed, code=last.code, reason=last.reason, message=last.message, rule=last.rule,
                    patch=list(mutation.patch) if last.allowed else [], warnings=warnings, audit_annotations=audit)
