"""The rule chains and their order: the one place that says which rule runs when.

A rule is a module with ``NAME``, ``handles(request) -> bool`` and ``admit(ctx)`` (mutating) or
``validate(ctx)`` (validating). It changes the pod only through ``ctx.patch``, adds warnings and
audit annotations to ``ctx.decision``, and returns a denial Decision or None to go on. A mutating
rule that changes what an earlier rule reads calls ``ctx.rerun``: the chain then runs once more on
the result, so that a reinvocation on its answer finds nothing left to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


from webhook.admission import (
    batch_mixing,
    batch_resources,
    batch_units,
    colocation_profile,
    koordinator_rules,
    priority,
    quota_presence,
)
from webhook.admission.patch import PatchBuilder
from webhook.admission.response import Decision, errored
from webhook.admission.review import AdmissionRequest
from webhook.cluster.state import ClusterState

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Settings:
    """Admission configuration from the command line (``--quota-config``)."""

    limited_resources: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Context:
    request: AdmissionRequest
    state: ClusterState
    settings: Settings
    pod: dict[str, Any]                      # working copy (mutating) or the object (validating)
    old_pod: dict[str, Any] | None
    patch: PatchBuilder
    decision: Decision
    explain: list[str] | None = None          # filled only for `review --explain`
    facts: dict[str, Any] = field(default_factory=dict)  # what earlier rules found out (kept across passes)
    rerun_reason: str | None = None           # set by ``rerun`` during a pass

    @property
    def namespace(self) -> str:
        return (self.pod.get("metadata") or {}).get("namespace") or self.request.namespace

    @property
    def pod_name(self) -> str:
        """The name used in Forbidden prefixes: name, else generateName, else "Unknown"."""
        meta = self.pod.get("metadata") or {}
        return meta.get("name") or self.request.name or meta.get("generateName") or "Unknown"

    def note(self, rule: str, text: str) -> None:
        """An ``--explain`` line. Callers building costly text check ``ctx.explain is not None`` first."""
        if self.explain is not None:
            self.explain.append(f"[{rule}] {text}")

    def rerun(self, reason: str) -> None:
        """Run the mutating chain once more after this pass: ``reason`` changed what an earlier rule
        reads (a label a profile may select on)."""
        self.rerun_reason = reason

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``facts[key]``, computed on first use, so rules share one pass over the pod. Only for
        values of the object as it came (the validating chain): mutating rules change the pod."""
        try:
            return self.facts[key]
        except KeyError:
            value = self.facts[key] = compute()
            return value


class MutatingRule(Protocol):
    NAME: str

    def handles(self, request: AdmissionRequest) -> bool: ...
    def admit(self, ctx: Context) -> Decision | None: ...


class ValidatingRule(Protocol):
    NAME: str

    def handles(self, request: AdmissionRequest) -> bool: ...
    def validate(self, ctx: Context) -> Decision | None: ...


MUTATING: tuple[Any, ...] = (colocation_profile, priority, batch_resources)
VALIDATING: tuple[Any, ...] = (batch_mixing, batch_units, koordinator_rules, quota_presence)
MAX_PASSES = 3  # a rerun is asked for once per pod (a label set where none was); the bound is a guard


def _run(rules: tuple[Any, ...], method: str, request: AdmissionRequest, state: ClusterState,
         settings: Settings, explain: list[str] | None, mutate: bool) -> Decision:
    decision = Decision()
    active = [r for r in rules if r.handles(request)]
    if explain is not None:
        for r in rules:
            if r not in active:
                explain.append(f"[{r.NAME}] skipped: does not handle {request.operation} "
                               f"{request.resource.resource}{'/' + request.subResource if request.subResource else ''}")
    if not active:
        return decision
    obj = request.object
    if not isinstance(obj, dict):
        return errored(400, f"request.object must be a {request.kind.kind or 'Pod'} object for "
                            f"{request.operation}, got {type(obj).__name__}")
    # The builder copies on write, so the mutating rules see their own changes while request.object
    # stays as it came (the final no-op check compares against it); no deep copy of the pod.
    patch = PatchBuilder(obj)
    pod = patch.doc if mutate else obj
    ctx = Context(request, state, settings, pod, request.oldObject, patch, decision, explain)
    for n in range(1, MAX_PASSES + 1):
        earlier = dict(decision.audit_annotations) if n > 1 else None
        ctx.rerun_reason = None
        for rule in active:
            try:
                verdict = getattr(rule, method)(ctx)
            except Exception as exc:  # a bug must not become a 500 with a traceback
                log.exception("rule %s failed on request %s", rule.NAME, request.uid)
                return errored(500, f"internal error in rule {rule.NAME}: {type(exc).__name__}", rule=rule.NAME)
            if verdict is not None and not verdict.allowed:
                verdict.warnings = decision.warnings + verdict.warnings
                verdict.audit_annotations = {**decision.audit_annotations, **verdict.audit_annotations}
                verdict.rule = verdict.rule or rule.NAME
                if explain is not None:
                    explain.append(f"[{rule.NAME}] denied: {verdict.message}")
                return verdict
        if earlier is not None:  # a later pass adds to what a rule said before, never replaces it
            for key, value in earlier.items():
                now = decision.audit_annotations.get(key)
                if now != value:
                    decision.audit_annotations[key] = f"{value}; {now}" if now else value
        if not mutate or ctx.rerun_reason is None or n == MAX_PASSES:
            break
        if explain is not None:
            explain.append(f"[chain] pass {n + 1}: {ctx.rerun_reason}")
    # Ops of different rules can cancel out (a profile's patch adds cpu, batch-resources removes
    # it); a patch that leaves the object as it was is no patch, so a reinvocation stays a no-op.
    # pod == obj first: copy on write shares every untouched subtree, so it is the cheap test.
    # _may_cancel keeps a patch that only changes a number's type (1 -> 1.0 compares equal).
    ops = ctx.patch.ops
    decision.patch = [] if mutate and ops and pod == obj and _may_cancel(ops) else ops
    return decision


def _may_cancel(ops: list[dict[str, Any]]) -> bool:
    """Whether some op touches a path another op touched (the only way ops can cancel out).
    In sorted order a path is followed by the paths it is a prefix of, so neighbours suffice."""
    paths = sorted(op["path"] for op in ops)
    return any(b.startswith(a) for a, b in zip(paths, paths[1:]))


def mutate(request: AdmissionRequest, state: ClusterState, settings: Settings,
           explain: list[str] | None = None) -> Decision:
    return _run(MUTATING, "admit", request, state, settings, explain, mutate=True)


def validate(request: AdmissionRequest, state: ClusterState, settings: Settings,
             explain: list[str] | None = None) -> Decision:
    return _run(VALIDATING, "validate", request, state, settings, explain, mutate=False)
