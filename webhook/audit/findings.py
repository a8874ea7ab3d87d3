"""An audited object's finding: the rules agree with it, would change it, or would refuse it.

Each subject goes through the very chains the webhook serves (``dry_run``: mutate, apply the patch, validate),
as a dry-run CREATE of its pod, so what `audit` says is what the webhook would answer today.

A change is a finding only where it goes beyond what the apiserver's own admission plugins do to every pod
(``beyond_plugins``): the priority rule mirrors the Priority plugin, so on its own it would report every pod
template in the cluster (templates never carry ``spec.priority``) for what the apiserver writes anyway.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.review import pod_review
from webhook.admission.rules.mutating import priority
from webhook.audit.subjects import Subject
from webhook.core.priority import resolve_priority
from webhook.server.service import ReviewService, dry_run

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
    # one uid for every review: nothing is sent, and a fresh UUID a pod is a cost for nothing
    run = dry_run(service, pod_review(subject.pod, username="colocation-webhook-audit", uid="colocation-webhook-audit"))
    if run.problem:
        return finding(UNUSABLE, "unusable pod", run.problem)
    outcome = run.outcome
    if not outcome.allowed:
        return finding(DENIED, outcome.rule or "webhook", outcome.message)
    warnings = "; ".join(outcome.warnings)
    state = service.state
    ops = beyond_plugins(subject.pod, outcome.patch, state.priority_class, state.default_priority_class())
    if ops:
        rules = ", ".join(_rules(run.mutation.patch_rules, ops))
        return finding(CHANGED, rules or "webhook", warnings or _patched(ops))
    return finding(AGREES, "", warnings)


# What the Priority plugin writes into a pod; our priority rule (and a profile's class) write the same fields.
PRIORITY_PATHS = ("/spec/priorityClassName", "/spec/priority", "/spec/preemptionPolicy")


def beyond_plugins(pod: dict[str, Any], ops: list[dict[str, Any]],
                   priority_class: Callable[[str], dict[str, Any] | None],
                   default_class: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ops of ``ops`` (the chains' patch of ``pod``) that do more than the apiserver's own admission plugins
    do to ``pod`` anyway, with or without this webhook.

    Of the plugins that write into every pod, only Priority has a mirror among the rules: it sets spec.priority
    and spec.preemptionPolicy from the pod's own priorityClassName, or from the global default PriorityClass,
    whose name it writes too, where the pod names none (``resolve_priority``, the rule's own resolution). An op
    that writes exactly that value there is left out; any other value (a profile's class, so another priority)
    stays, as does every other op. LimitRanger's defaults have no mirror (the limit-ranges rule only refuses),
    nor have the other plugins'. Where the plugin would refuse the pod, it writes nothing: all ops stay."""
    spec = pod.get("spec")
    if not ops or not isinstance(spec, dict):
        return ops
    res = resolve_priority(spec, priority_class, default_class)
    if res.error is not None:
        return ops
    plugin: dict[str, Any] = {"/spec/priority": res.priority, "/spec/preemptionPolicy": res.preemption_policy}
    if res.class_name and not spec.get("priorityClassName"):
        plugin["/spec/priorityClassName"] = res.class_name
    return [op for op in ops if not (op["op"] in ("add", "replace") and op["path"] in plugin
                                     and _same(op.get("value"), plugin[op["path"]]))]


def _same(value: Any, plugin: Any) -> bool:
    return type(value) is type(plugin) and value == plugin  # 1.0 or True is no priority the plugin writes


def _rules(patch_rules: dict[str, int], ops: list[dict[str, Any]]) -> list[str]:
    """The rules whose patch changes the pod: the priority rule only where one of its fields still changes
    (it writes nothing else; a field it wrote as the plugin would is no change of the rules')."""
    rules = list(patch_rules)
    if not any(op["path"] in PRIORITY_PATHS for op in ops):
        rules = [r for r in rules if r != priority.NAME]
    return rules


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
