"""What a rule gets: the request, the cluster state, the settings, the pod, and a typed place for what it finds.

A mutating rule gets a ``MutatingContext``: the working pod, the ``PatchBuilder`` that is the only way to change
it, and ``MutatingFacts`` that earlier rules filled in. A validating rule gets a ``ValidatingContext``, which has
no patch builder at all: a validating webhook that sent a patch would be refused by the apiserver, so a validating
rule cannot make one. Both add warnings and audit annotations through the context; the chain turns them, with the
first denial, into the answer. A validating rule judges through ``ValidatingContext.judge``, so that on UPDATE it
refuses only what the update brings (``domain.ratchet``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.admission.domain.patch import PatchBuilder
from webhook.admission.domain.ratchet import Ratchet, carried_audit, carried_note, carried_warning, ratchet
from webhook.admission.response import WARNING_LIMIT
from webhook.admission.review import AdmissionRequest
from webhook.cluster.state import ClusterState
from webhook.core.resources import ResourceList, resource_lists

RuleErrorPolicy = Literal["allow", "deny"]
# The rules' cost grows with the containers: the cap bounds a review's time on one core (docs/benchmarks.md,
# "Figures behind the code's comments"); upstream sets no limit, and real pods have a few dozen at the very most.
MAX_CONTAINERS = 1000
MAX_PATCH_BYTES = 1024 * 1024  # the patch's JSON; the answer carries it in base64, a third more


@dataclass(slots=True)
class Settings:
    """Admission configuration from the command line."""

    limited_resources: list[dict[str, Any]] = field(default_factory=list)  # --quota-config
    # --on-rule-error: what a review gets when a rule raises. "allow" is fail-open, as failurePolicy Ignore asks
    # of a webhook that fails; "deny" is fail-closed (a 500 denial).
    on_rule_error: RuleErrorPolicy = "allow"
    # The work one review may cost (--max-containers, --max-patch-bytes): past either the review is answered
    # with a 400 denial naming the limit, before the chain runs or instead of the patch.
    max_containers: int = MAX_CONTAINERS
    max_patch_bytes: int = MAX_PATCH_BYTES
    # Every pod's probability draw, when set (`audit`: a pod template stands for all the pods it makes, which draw
    # each for itself, so 0 lets every profile above 0 % count and nothing is recorded); None draws per pod.
    pinned_draw: int | None = None
    # The length a warning is cut to: the apiserver's guidance for what it passes on to kubectl. None keeps every
    # warning whole (`review`, `audit`: a person reads them on a terminal, not through the apiserver).
    warning_limit: int | None = WARNING_LIMIT


def shorten_warning(text: str, limit: int | None = WARNING_LIMIT) -> str:
    """A warning cut to ``limit`` characters (the apiserver's 120), or whole when ``limit`` is None."""
    return text if limit is None or len(text) < limit else text[: limit - 2] + "…"


# The contexts are plain classes, not dataclasses: mypyc compiles their __init__, where a dataclass's is generated
# Python, and every review makes one (docs/benchmarks.md, "The last per cent").
class MutatingFacts:
    """What the mutating rules found out, for the rules after them (set in chain order)."""

    def __init__(self) -> None:
        self.priority: int | None = None                 # spec.priority once the priority rule resolved it
        self.matched_profiles: list[str] = []            # ClusterColocationProfiles applied, in order
        self.skip_update_resources = False               # a matched profile turns the batch conversion off
        self.profile_label_keys: frozenset[str] = frozenset()  # pod label keys the namespace's profiles read
        # (field, index) of the containers (("overhead", 0) for spec.overhead) the batch conversion converted,
        # kept across passes: what a later pass sees there is no longer what the user wrote.
        self.converted: set[tuple[str, int]] = set()


class _Context:
    def __init__(self, request: AdmissionRequest, state: ClusterState, settings: Settings, pod: dict[str, Any],
                 old_pod: dict[str, Any] | None, explain: list[str] | None = None) -> None:
        self.request = request
        self.state = state
        self.settings = settings
        self.pod = pod
        self.old_pod = old_pod
        self.explain = explain                           # filled only for `review --explain`
        self.warnings: list[str] = []
        self.audit_annotations: dict[str, str] = {}

    @property
    def namespace(self) -> str:
        meta = self.pod.get("metadata")
        return (meta.get("namespace") if isinstance(meta, dict) else None) or self.request.namespace

    @property
    def identity(self) -> str:
        """The pod's name, else the request's, else its generateName ("" when none: a pod being created with
        generateName has no name yet)."""
        meta = self.pod.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        return meta.get("name") or self.request.name or meta.get("generateName") or ""

    @property
    def pod_name(self) -> str:
        """The name used in Forbidden prefixes: ``identity``, else "Unknown"."""
        return self.identity or "Unknown"

    def warn(self, text: str) -> None:
        """A warning for the client (kubectl prints it), shortened to ``Settings.warning_limit``."""
        text = shorten_warning(text, self.settings.warning_limit)
        if text not in self.warnings:
            self.warnings.append(text)

    def audit(self, rule: str, text: str) -> None:
        """An audit annotation: what the rule did, for the apiserver's audit log."""
        self.audit_annotations[rule] = text

    def note(self, rule: str, text: str) -> None:
        """An ``--explain`` line. Callers building costly text check ``ctx.explain is not None`` first."""
        if self.explain is not None:
            self.explain.append(f"[{rule}] {text}")


class MutatingContext(_Context):
    def __init__(self, request: AdmissionRequest, state: ClusterState, settings: Settings, pod: dict[str, Any],
                 old_pod: dict[str, Any] | None, explain: list[str] | None = None, *, patch: PatchBuilder) -> None:
        super().__init__(request, state, settings, pod, old_pod, explain)
        self.patch = patch                               # the working pod is ``patch.doc``
        self.facts = MutatingFacts()
        self.rerun_reason: str | None = None             # set by ``rerun`` during a pass

    def rerun(self, reason: str) -> None:
        """Run the mutating chain once more after this pass: ``reason`` changed what an earlier rule reads (a
        label a profile may select on), and the answer must be its own fixpoint under reinvocation."""
        self.rerun_reason = reason

    def take_rerun(self) -> str | None:
        """The reason ``rerun`` was asked for in this pass (None: not asked), cleared for the next pass."""
        reason, self.rerun_reason = self.rerun_reason, None
        return reason


class ValidatingContext(_Context):
    def __init__(self, request: AdmissionRequest, state: ClusterState, settings: Settings, pod: dict[str, Any],
                 old_pod: dict[str, Any] | None, explain: list[str] | None = None) -> None:
        super().__init__(request, state, settings, pod, old_pod, explain)
        self._resource_lists: list[ResourceList] | None = None

    @property
    def resource_lists(self) -> list[ResourceList]:
        """Every ResourceList of the pod, found once for all validating rules (the object does not change)."""
        if self._resource_lists is None:
            spec = self.pod.get("spec")
            self._resource_lists = resource_lists(spec if isinstance(spec, dict) else {})
        return self._resource_lists

    def judge(self, rule: str, findings: Callable[[ValidatingContext], list[str]],
              always: Sequence[str] = ()) -> Ratchet:
        """What rule ``rule`` refuses: ``always`` (errors no old object excuses: a forbidden transition), then
        what ``findings`` (the rule's errors about the pod a context holds) finds here, ratcheted on UPDATE: an
        error the old object already carried is allowed (an ``--explain`` line; when nothing is refused also one
        warning line and an audit annotation). ``findings`` runs on the old object only when it finds something."""
        errors = findings(self)
        if not errors or self.request.operation != "UPDATE" or not isinstance(self.old_pod, dict):
            return Ratchet([*always, *errors] if always else errors, ())  # the common path: no copy
        old = ValidatingContext(self.request, self.state, self.settings, self.old_pod, None)
        verdict = ratchet(errors, findings(old))
        if verdict.carried:
            self.note(rule, carried_note(verdict.carried))
            if not always and not verdict.refused:
                self.warn(carried_warning(rule, verdict.carried))
                self.audit(rule, carried_audit(verdict.carried))
        return Ratchet([*always, *verdict.refused], verdict.carried)
