"""An audited object's finding: the rules agree with it, would change it, or would refuse it.

Each subject goes through the very chains the webhook serves (``dry_run``: mutate, apply the patch, validate),
as a dry-run CREATE of its pod, so what `audit` says is what the webhook would answer today.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.review import pod_review
from webhook.admission.rules import priority
from webhook.admission.service import ReviewService, dry_run
from webhook.audit.subjects import ADMISSION_SPEC, Subject

AGREES, CHANGED, DENIED, UNUSABLE = "agrees", "changed", "denied", "unusable"


@dataclass(slots=True, frozen=True)
class Finding:
    kind: str
    namespace: str
    name: str
    owner: str
    verdict: str        # agrees, changed, denied, unusable
    reason: str         # what the summary groups by: the rules that change it, the rule that refuses it
    detail: str         # one line: what would change, the denial's message, or the warnings

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "owner": self.owner,
                "verdict": self.verdict, "reason": self.reason, "detail": self.detail}


def audit(service: ReviewService, subject: Subject) -> Finding:
    """What the rules say of ``subject`` today."""
    def finding(verdict: str, reason: str, detail: str) -> Finding:
        return Finding(subject.kind, subject.namespace, subject.name, subject.owner, verdict, reason, detail)

    if subject.pod is None:
        return finding(UNUSABLE, "no pod", subject.problem)
    # one uid for every review: nothing is sent, and a fresh UUID a pod is 2 µs of 190
    run = dry_run(service, pod_review(subject.pod, username="colocation-webhook-audit", uid="colocation-webhook-audit"))
    if run.problem:
        return finding(UNUSABLE, "unusable pod", run.problem)
    outcome = run.outcome
    if not outcome.allowed:
        return finding(DENIED, outcome.rule or "webhook", outcome.message)
    warnings = "; ".join(outcome.warnings)
    if outcome.patch and (subject.stored is None or run.final != subject.stored):
        ops, rules = _changes(outcome.patch, list(run.mutation.patch_rules), subject.stored)
        return finding(CHANGED, ", ".join(rules) or "webhook", warnings or _patched(ops))
    return finding(AGREES, "", warnings)


def _changes(ops: list[dict[str, Any]], rules: list[str],
             stored: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The ops and rules that change the stored pod: the Priority rule writing back, unchanged, the values it
    wrote when the pod was created (the audit leaves them out of what it sends) changes nothing."""
    spec = (stored or {}).get("spec")
    if not isinstance(spec, dict):
        return ops, rules
    written = {f"/spec/{k}": spec[k] for k in ADMISSION_SPEC if k in spec}
    real = [op for op in ops if not (op["op"] != "remove" and op["path"] in written
                                     and written[op["path"]] == op.get("value"))]
    if not any(op["path"].startswith("/spec/priority") or op["path"] == "/spec/preemptionPolicy" for op in real):
        rules = [r for r in rules if r != priority.NAME]
    return real, rules


def _patched(ops: list[dict[str, Any]], shown: int = 4) -> str:
    """What a patch changes, for a change no rule warned about: ``add /metadata/annotations (a, b)``."""
    parts = []
    for op in ops[:shown]:
        value = op.get("value")
        keys = f" ({', '.join(value)})" if isinstance(value, dict) and op["path"].startswith("/metadata/") else ""
        parts.append(f"{op['op']} {op['path']}{keys}")
    more = f" and {len(ops) - shown} more" if len(ops) > shown else ""
    return ", ".join(parts) + more


@dataclass(slots=True)
class Tally:
    """Counts by verdict and by (verdict, reason), for the summary and the exit status."""

    verdicts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, f: Finding) -> None:
        self.verdicts[f.verdict] += 1
        if f.verdict != AGREES:
            self.reasons[(f.verdict, f.reason)] += 1

    @property
    def total(self) -> int:
        return sum(self.verdicts.values())

    @property
    def all_agree(self) -> bool:
        return self.verdicts[AGREES] == self.total

    def line(self) -> str:
        parts = [f"{self.verdicts[v]} {label}" for v, label in
                 ((AGREES, "agree"), (CHANGED, "would be changed"), (DENIED, "would be denied"),
                  (UNUSABLE, "could not be audited")) if self.verdicts[v] or v == AGREES]
        return f"audited {self.total} object(s): {', '.join(parts)}"
