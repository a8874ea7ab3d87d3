"""The rule chains and their order: the one place that says which rule runs when.

A rule is a module with ``NAME``, ``handles(request) -> bool`` and ``admit(ctx: MutatingContext)`` (mutating) or
``validate(ctx: ValidatingContext)`` (validating), returning a ``Denial`` to stop or None to go on. A mutating rule
changes the pod only through ``ctx.patch`` and tells later rules what it found through ``ctx.facts``; no rule
imports another. Both kinds add warnings and audit annotations through the context. A mutating rule that changes
what an earlier rule reads calls ``ctx.rerun``: the chain then runs once more on the result, so that a
reinvocation on its answer finds nothing left to do.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from threading import Lock, get_ident
from time import perf_counter_ns
from typing import Any, Protocol, TypeVar

from webhook.admission.context import MutatingContext, Settings, ValidatingContext, _Context, shorten_warning
from webhook.admission.domain.patch import PatchBuilder
from webhook.admission.response import Decision, Denial, errored
from webhook.admission.review import AdmissionRequest
from webhook.admission.rules.mutating import batch_resources, colocation_profile, limit_ranges, priority
from webhook.admission.rules.validating import (
    batch_mixing,
    batch_units,
    koordinator_rules,
    quota_constraints,
    quota_presence,
)
from webhook.cluster.state import ClusterState
from webhook.core.resources import review_shape_error

__all__ = ["MUTATING", "VALIDATING", "RuleTimes", "Settings", "mutate", "validate"]

log = logging.getLogger(__name__)


class MutatingRule(Protocol):
    @property
    def NAME(self) -> str: ...
    def handles(self, request: AdmissionRequest) -> bool: ...
    def admit(self, ctx: MutatingContext) -> Denial | None: ...


class ValidatingRule(Protocol):
    @property
    def NAME(self) -> str: ...
    def handles(self, request: AdmissionRequest) -> bool: ...
    def validate(self, ctx: ValidatingContext) -> Denial | None: ...


# limit-ranges last: it reads the pod as converted (LimitRanger validates it before any validating webhook).
MUTATING: tuple[MutatingRule, ...] = (colocation_profile, priority, batch_resources, limit_ranges)
# quota-constraints before quota-presence: the ResourceQuota plugin checks a quota's constraints first.
VALIDATING: tuple[ValidatingRule, ...] = (batch_mixing, batch_units, koordinator_rules, quota_constraints,
                                          quota_presence)
CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")
MAX_PASSES = 3  # a rerun is asked for once per pod (a label set where none was); the bound is a guard
ADMIT, VALIDATE = "admit", "validate"


class RuleTimes:
    """Each rule's runs and time, per webhook type ("admit", "validate", the apiserver's names) and operation, for
    the metrics (``Metrics.rule_times``, exported at scrape time). A run is one call of the rule: a rerun pass
    counts again.

    Plain ints added in place: a prometheus_client child would cost a lock and a method per rule run
    (docs/benchmarks.md, "the per-rule time metric"). Rules run on the event loop's thread and on the large-review
    worker's, so each thread adds to a tally of its own (``tally``), and ``totals`` sums them: no run is lost when
    two threads time the same rule at once, and no lock is taken per run (only once per thread, on its first)."""

    def __init__(self) -> None:
        self._threads: dict[int, dict[tuple[str, str], dict[str, list[int]]]] = {}
        self._lock = Lock()

    def tally(self, kind: str, operation: str) -> dict[str, list[int]]:
        """This thread's rule -> [runs, nanoseconds] for ``kind`` and ``operation``, to add to in place."""
        mine = self._threads.get(get_ident())
        if mine is None:
            mine = self._own()
        rules = mine.get((kind, operation))
        if rules is None:
            rules = mine[(kind, operation)] = {}
        return rules

    def _own(self) -> dict[tuple[str, str], dict[str, list[int]]]:
        # A thread's first run. A thread that ended leaves its tally here, counted; a new thread given its
        # identifier adds to it, alone as the old one was.
        with self._lock:
            return self._threads.setdefault(get_ident(), {})

    def record(self, kind: str, operation: str, rule: str, nanoseconds: int) -> None:
        """One run of ``rule``, as the chain adds it."""
        rules = self.tally(kind, operation)
        acc = rules.get(rule)
        if acc is None:
            rules[rule] = [1, nanoseconds]
        else:
            acc[0] += 1
            acc[1] += nanoseconds

    def totals(self) -> dict[tuple[str, str, str], tuple[int, int]]:
        """(kind, operation, rule) -> (runs, nanoseconds) over every thread. Each dict is copied in one C call,
        so one being added to meanwhile is never seen half-written."""
        out: dict[tuple[str, str, str], tuple[int, int]] = {}
        for tallies in list(self._threads.values()):
            for (kind, operation), rules in list(tallies.items()):
                for rule, (count, ns) in list(rules.items()):
                    runs, total = out.get((kind, operation, rule), (0, 0))
                    out[(kind, operation, rule)] = (runs + count, total + ns)
        return out

C = TypeVar("C", bound=_Context)


def _begin(rules: tuple[Any, ...], request: AdmissionRequest, settings: Settings,
           explain: list[str] | None) -> tuple[list[Any], dict[str, Any]] | Decision:
    """The rules that handle the request and the object they work on, or the answer when there is nothing
    to run (no rule handles it: allowed; an object that is no object, or more containers than the cap: 400)."""
    active = [r for r in rules if r.handles(request)]
    if explain is not None:
        sub = "/" + request.subResource if request.subResource else ""
        explain.extend(f"[{r.NAME}] skipped: does not handle {request.operation} {request.resource.resource}{sub}"
                       for r in rules if r not in active)
    if not active:
        return Decision()
    obj: Any = request.object
    if not isinstance(obj, dict):
        return errored(400, f"request.object must be a {request.kind.kind or 'Pod'} object for "
                            f"{request.operation}, got {type(obj).__name__}")
    spec = obj.get("spec")
    if isinstance(spec, dict):  # the work cap, before any rule: the rules' cost grows with the containers
        n = sum(len(v) for k in CONTAINER_FIELDS if isinstance(v := spec.get(k), list))
        if n > settings.max_containers:
            return errored(400, f"the pod has {n} containers (containers, initContainers and ephemeralContainers "
                                f"together), more than the {settings.max_containers} this webhook reviews "
                                "(its --max-containers)")
    return active, obj


def _run(kind: str, steps: list[tuple[str, Callable[[C], Denial | None]]], ctx: C, rule_times: RuleTimes | None,
         ops: list[dict[str, Any]] | None = None, patch_rules: dict[str, int] | None = None) -> Decision | None:
    """Run the rules in order; the first denial (or a rule that raised) ends the chain as a Decision.
    ``ops``/``patch_rules``: the patch being built, and where to count the ops each rule adds to it. Each rule's
    time goes to ``rule_times`` under ``kind`` (admit, validate), when given."""
    times = rule_times.tally(kind, ctx.request.operation) if rule_times is not None else {}
    # One clock read per rule (the end of one is the start of the next): a rule's time includes the few lookups
    # of this loop before it.
    start = perf_counter_ns()
    for name, step in steps:
        before = len(ops) if ops is not None else 0
        failure: Exception | None = None
        try:
            verdict = step(ctx)
        except Exception as exc:  # a bug must not become a 500 with a traceback, nor block the cluster
            verdict, failure = None, exc
        end = perf_counter_ns()
        acc = times.get(name)
        if acc is None:
            times[name] = [1, end - start]
        else:
            acc[0] += 1
            acc[1] += end - start
        start = end
        if failure is not None:
            return _rule_failed(name, failure, ctx)
        if ops is not None and patch_rules is not None and len(ops) != before:
            patch_rules[name] = patch_rules.get(name, 0) + len(ops) - before
        if verdict is not None:
            ctx.note(name, f"denied: {verdict.message}")
            return Decision.of(verdict, name, ctx.warnings, ctx.audit_annotations)
    return None


def _rule_failed(name: str, exc: Exception, ctx: _Context) -> Decision:
    """The answer when rule ``name`` raised, as ``--on-rule-error`` says: "allow" answers as if this webhook
    were not there (allowed, no patch: what failurePolicy Ignore does for a webhook that fails), with a warning
    naming the rule; "deny" answers a 500 denial. Either way one log line with the review's uid; the traceback
    only at debug level."""
    req, policy = ctx.request, ctx.settings.on_rule_error
    log.error("rule %s raised %s: %s; review %s (%s %s/%s) %s (--on-rule-error %s)", name, type(exc).__name__, exc,
              req.uid, req.operation, ctx.namespace, ctx.pod_name,
              "allowed" if policy == "allow" else "denied", policy,
              extra={"uid": req.uid, "rule": name, "namespace": ctx.namespace, "pod": ctx.pod_name})
    log.debug("rule %s traceback", name, exc_info=exc)
    ctx.note(name, f"raised {type(exc).__name__}: {exc}")
    if policy == "deny":
        decision = errored(500, f"internal error in rule {name}: {type(exc).__name__}", rule=name)
    elif isinstance(ctx, MutatingContext):
        decision = Decision(rule=name, warnings=[shorten_warning(
            f"colocation-webhook: rule {name} failed ({type(exc).__name__}); admitted without its changes",
            ctx.settings.warning_limit)])
    else:  # the rules before passed: their warnings and annotations stand
        warning = shorten_warning(f"colocation-webhook: rule {name} failed ({type(exc).__name__}); admitted "
                                  "without the remaining checks", ctx.settings.warning_limit)
        decision = Decision(rule=name, warnings=[*ctx.warnings, warning], audit_annotations=ctx.audit_annotations)
    decision.rule_failed = True
    return decision


def mutate(request: AdmissionRequest, state: ClusterState, settings: Settings,
           explain: list[str] | None = None, rules: tuple[MutatingRule, ...] = MUTATING,
           rule_times: RuleTimes | None = None) -> Decision:
    begun = _begin(rules, request, settings, explain)
    if isinstance(begun, Decision):
        return begun
    active, obj = begun
    # The rules read the pod's outline without checking it (the validating chain refuses a bad one with the
    # same 400); one that is not what the API defines gets that 400 here too, not a rule's crash.
    old_object: Any = request.oldObject  # a plain dict to the rules, as obj (the schema's TypedDict picks fields)
    old = old_object if request.operation == "UPDATE" and isinstance(old_object, dict) else None
    shape = review_shape_error(obj, old)
    if shape is not None:
        return errored(400, shape)
    # The builder copies on write, so the rules see their own changes while request.object stays as it
    # came (the final no-op check compares against it); no deep copy of the pod.
    patch = PatchBuilder(obj)
    ctx = MutatingContext(request, state, settings, patch.doc, old_object, explain, patch=patch)
    steps = [(r.NAME, r.admit) for r in active]
    patch_rules: dict[str, int] = {}
    for n in range(1, MAX_PASSES + 1):
        earlier = dict(ctx.audit_annotations)
        denial = _run(ADMIT, steps, ctx, rule_times, patch.ops, patch_rules)
        if denial is not None:
            return denial
        for key, value in earlier.items():  # a later pass adds to what a rule said before, never replaces it
            now = ctx.audit_annotations.get(key)
            if now != value:
                ctx.audit_annotations[key] = f"{value}; {now}" if now else value
        reason = ctx.take_rerun()
        if reason is None or n == MAX_PASSES:
            break
        ctx.note("chain", f"pass {n + 1}: {reason}")
    # Ops of different rules can cancel out (a profile's patch adds cpu, batch-resources removes it); a
    # patch that leaves the object as it was is no patch, so a reinvocation stays a no-op. pod == obj
    # first: copy on write shares every untouched subtree, so it is the cheap test. _may_cancel keeps a
    # patch that only changes a number's type (1 -> 1.0 compares equal).
    ops = patch.ops
    if ops and patch.doc == obj and _may_cancel(ops):
        ops, patch_rules = [], {}
    return Decision(patch=ops, warnings=ctx.warnings, audit_annotations=ctx.audit_annotations,
                    patch_rules=patch_rules)


def validate(request: AdmissionRequest, state: ClusterState, settings: Settings,
             explain: list[str] | None = None, rules: tuple[ValidatingRule, ...] = VALIDATING,
             rule_times: RuleTimes | None = None) -> Decision:
    begun = _begin(rules, request, settings, explain)
    if isinstance(begun, Decision):
        return begun
    active, obj = begun
    old_object: Any = request.oldObject
    ctx = ValidatingContext(request, state, settings, obj, old_object, explain)
    denial = _run(VALIDATE, [(r.NAME, r.validate) for r in active], ctx, rule_times)
    # No patch here, by construction: a validating context has no patch builder.
    return denial or Decision(warnings=ctx.warnings, audit_annotations=ctx.audit_annotations)


def _may_cancel(ops: list[dict[str, Any]]) -> bool:
    """Whether some op touches a path another op touched (the only way ops can cancel out).
    In sorted order a path is followed by the paths it is a prefix of, so neighbours suffice."""
    paths = sorted(op["path"] for op in ops)
    return any(b.startswith(a) for a, b in itertools.pairwise(paths))
