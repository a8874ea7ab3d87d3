"""ClusterColocationProfile: matching, the probability draw and what one profile does to a pod.

The profiles arrive compiled and judged (``webhook/cluster/profiles.py``, through the cluster state); this module
never checks one again. Semantics follow Koordinator (``pkg/webhook/pod/mutating/cluster_colocation_profile.go``)
with our deliberate deviations (docs/admission-rules-mutating.md, "Where we differ from Koordinator on purpose"):
matching fails closed (an unknown namespace or a profile no rule can apply means no match, with a reason; so does
a field whose output the apiserver would refuse on the pod), and ``probability: 50`` gives each pod a 50 % chance
(Koordinator: 51 %), drawn once per pod so that every (re)invocation gets the same answer (``pod_draw``).

Pure functions over plain dicts; a transformed pod shares every untouched subtree with its input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.domain.strategic_merge import StrategicMergeError, merge
from webhook.cluster.profiles import IDENTITY_FIELDS, Profile
from webhook.core.fielderrors import invalid
from webhook.core.names import LABEL_MAX, label_value
from webhook.core.priority import SUB_PRIORITY_LABEL, preemption_policy_of
from webhook.core.qos import QOS_LABEL
from webhook.core.resources import as_object, pod_shape_error
from webhook.core.selectors import CompiledSelector, describe_selector

# The probability draw of a pod created without a name (see ``pod_draw``).
DRAW_ANNOTATION = "colocation.koordinator.sh/probability-draw"


class DrawError(ValueError):
    """A pod whose recorded probability draw is none (``DRAW_ANNOTATION``): refused, with the reason."""


class ApplyError(ValueError):
    """A profile that cannot be applied to this pod; ``deny`` marks the upstream Forbidden cases."""

    def __init__(self, message: str, deny: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.deny = deny


def probability_draw(namespace: str, name: str) -> int:
    """A draw in 0..99 from a text: stable across processes and (re)invocations (not Python's hash())."""
    digest = hashlib.blake2b(f"{namespace}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 100


def pod_draw(namespace: str, name: str, generate_name: str, request_uid: str,
             annotations: Mapping[str, Any]) -> tuple[int, bool]:
    """The pod's draw in 0..99, and whether it must be recorded in ``DRAW_ANNOTATION``.

    Per pod, as Koordinator draws: a recorded draw is kept (our own, on a reinvocation: the same answer again);
    a pod with a name draws from it (a StatefulSet's web-0 gets the same answer at every re-creation); a pod still
    without one (``generateName``: every ReplicaSet, Job and DaemonSet pod, all alike until the apiserver names them
    after admission) draws from its admission request's uid, unique per call, and records it, since a reinvocation
    brings another uid. Raises DrawError for a recorded draw that is not one.
    """
    recorded = annotations.get(DRAW_ANNOTATION)
    if recorded is not None:
        if not (isinstance(recorded, str) and recorded.isascii() and recorded.isdigit() and int(recorded) < 100):
            raise DrawError(invalid(f"metadata.annotations[{DRAW_ANNOTATION}]", recorded,
                                       "must be an integer from 0 to 99 (the pod's probability draw)"))
        return int(recorded), False
    if name:
        return probability_draw(namespace, name), False
    return probability_draw(namespace, f"{generate_name}{request_uid}"), True


def suffix_tails(profiles: list[Profile]) -> list[dict[str, str]]:
    """For each profile, per label key, the suffixes later profiles in the list append to that key."""
    tails: list[dict[str, str]] = [{} for _ in profiles]
    acc: dict[str, str] = {}
    for i in range(len(profiles) - 1, -1, -1):
        tails[i] = dict(acc)
        for key, suffix in profiles[i].label_suffixes.items():
            acc[key] = suffix + acc.get(key, "")
    return tails


def _append_suffix(value: str, suffix: str, tail: str) -> str:
    # Idempotent: a value that already ends with this suffix (alone, or followed by the suffixes
    # later profiles append to the same key) is our own output and is left alone.
    if value.endswith(suffix) or (tail and value.endswith(suffix + tail)):
        return value
    return value + suffix


def apply_profile(pod: dict[str, Any], p: Profile, lookup_class: Callable[[str], dict[str, Any] | None],
                  tail: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The pod after one profile, in Koordinator's order (its ``doMutateByColocationProfile``). Raises ApplyError."""
    meta = as_object(pod.get("metadata"))
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    labels.update(p.labels)
    annotations.update(p.annotations)
    for old, new in p.label_keys_mapping.items():
        labels[new] = labels.get(old, "")
    for old, new in p.annotation_keys_mapping.items():
        annotations[new] = annotations.get(old, "")
    for key, suffix in p.label_suffixes.items():
        if key in labels:
            value = _append_suffix(labels[key], suffix, (tail or {}).get(key, ""))
            too_long = label_value(value) if len(value) >= LABEL_MAX else []
            if too_long:  # the suffix's characters were checked at load; only this pod's value makes it too long
                raise ApplyError(invalid(f"spec.labelSuffixes[{key}]", value, too_long[0]))
            labels[key] = value
    if p.qos_class:
        labels[QOS_LABEL] = p.qos_class
    if p.koordinator_priority is not None:
        labels[SUB_PRIORITY_LABEL] = str(p.koordinator_priority)

    new_meta = dict(meta)
    if labels or "labels" in meta:
        new_meta["labels"] = labels if labels != meta.get("labels") else meta.get("labels")
    if annotations or "annotations" in meta:
        new_meta["annotations"] = annotations if annotations != meta.get("annotations") else meta.get("annotations")
    out = dict(pod)
    out["metadata"] = new_meta

    if p.scheduler_name or p.priority_class_name:
        given = pod.get("spec") or {}
        spec = dict(given)
        if p.scheduler_name:
            spec["schedulerName"] = p.scheduler_name
        if p.priority_class_name:
            pc = lookup_class(p.priority_class_name)
            if pc is None:
                raise ApplyError(f"no PriorityClass with name {p.priority_class_name} was found", deny=True)
            # All three together, so the apiserver's reinvoked Priority plugin accepts the pod.
            spec["priorityClassName"] = p.priority_class_name
            spec["priority"] = int(pc.get("value", 0))
            spec["preemptionPolicy"] = preemption_policy_of(pc)
        # A spec that already says all this stays the pod's own object (the usual case: the pod
        # names the class the profile sets), so callers comparing by identity skip it.
        out["spec"] = given if isinstance(given, dict) and _holds(given, spec, _SPEC_FIELDS) else spec

    if p.patch is not None:
        try:
            out = merge(out, p.patch)
        except StrategicMergeError as exc:
            raise ApplyError(f"patch: {exc}") from None
        _check_patched(pod, out)
    return out


def _check_patched(pod: dict[str, Any], out: dict[str, Any]) -> None:
    """A patch may not move or rename the pod, nor leave one the API could not hold: what it gives is
    checked, not only its keys (``$patch: delete``/``replace`` and nulls remove fields too)."""
    before, after = as_object(pod.get("metadata")), as_object(out.get("metadata"))
    for f in IDENTITY_FIELDS:
        if before.get(f) != after.get(f):
            raise ApplyError(f"patch: a profile may not change the pod's {f}")
    shape = pod_shape_error(out)
    if shape is not None:
        raise ApplyError(f"patch: the pod it gives is not valid: {shape}")


_SPEC_FIELDS = ("schedulerName", "priorityClassName", "priority", "preemptionPolicy")


def _holds(given: dict[str, Any], wanted: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether ``given`` has every one of ``keys`` that ``wanted`` has, with the same value and type."""
    for k in keys:
        if k in wanted:
            if k not in given:
                return False
            a, b = given[k], wanted[k]
            if a is not b and (a != b or type(a) is not type(b)):
                return False
    return True


def changed_label_keys(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    if before is after:
        return set()
    keys = {k for k, v in after.items() if before.get(k) != v}
    keys.update(k for k in before if k not in after)
    return keys


def pod_labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


class NamespaceProfiles:
    """The profiles whose namespaceSelector matches one namespace, indexed for fast pod matching.

    Index: profiles with an empty selector always pass; the others are found through one condition
    every matching pod meets, or checked one by one when they have none (only NotIn/DoesNotExist). ``by_key`` lists
    the profiles each label key can affect, so a re-match after a label change is incremental.
    """

    def __init__(self, profiles: list[Profile], candidates: list[int], broken: list[Profile]) -> None:
        self.profiles = profiles
        self.candidates = candidates
        self.broken = broken
        self._always: list[int] = []
        self._by_pair: dict[tuple[str, str], list[int]] = {}
        self._scan: list[int] = []
        self._by_key_present: dict[str, list[int]] = {}
        self.by_key: dict[str, list[int]] = {}
        self._selector: dict[int, CompiledSelector] = {}  # the candidates that have a selector
        for i in candidates:
            sel = profiles[i].selector
            if sel is None:
                self._always.append(i)
                continue
            self._selector[i] = sel
            # Index under one condition the pod must meet: a matchLabels pair, else each value of
            # an In expression (a pod has one value per key, so at most one hit), else an Exists key.
            required_in = next((e for e in sel.expressions if e[0] == "In"), None)
            required_key = next((e[1] for e in sel.expressions if e[0] == "Exists"), None)
            if sel.match_labels:
                self._by_pair.setdefault(sel.match_labels[0], []).append(i)
            elif required_in is not None:
                for value in required_in[2]:
                    self._by_pair.setdefault((required_in[1], value), []).append(i)
            elif required_key is not None:
                self._by_key_present.setdefault(required_key, []).append(i)
            else:
                self._scan.append(i)
            for k in sel.keys:
                self.by_key.setdefault(k, []).append(i)
        # Every pod label key these profiles read (to select, map or suffix): a rule that sets another
        # label cannot change what they do.
        self.label_keys_read = frozenset(self.by_key).union(
            *(profiles[i].label_keys_mapping.keys() | profiles[i].label_suffixes.keys() for i in candidates))
        # The profiles whose probability the draw decides (0 % never applies, 100 % always): most views have none.
        self._drawing = [i for i in candidates if 0 < profiles[i].percent < 100]
        self.draws = bool(self._drawing)  # whether the pod's draw can matter

    def drawn(self, *label_sets: Mapping[str, str]) -> bool:
        """Whether the draw decided something: a profile of probability between 0 and 100 selects these labels."""
        return any(self.profiles[i].selector is None or any(self._selector[i].matches(ls) for ls in label_sets)
                   for i in self._drawing)

    def _passes(self, i: int, labels: Mapping[str, str], draw: int) -> bool:
        return draw < self.profiles[i].percent and self._selector[i].matches(labels)

    def select(self, labels: Mapping[str, str], draw: int) -> list[int]:
        """Indices (name order) of the profiles that match ``labels`` and whose probability passes."""
        hits = [i for i in self._always if draw < self.profiles[i].percent]
        maybe = [i for pair in labels.items() for i in self._by_pair.get(pair, ())] if self._by_pair else []
        if self._by_key_present:
            maybe += [i for key in labels for i in self._by_key_present.get(key, ())]
        hits += [i for i in (*maybe, *self._scan) if self._passes(i, labels, draw)]
        hits.sort()
        return hits

    def reselect(self, previous: list[int], labels: Mapping[str, str], changed: set[str], draw: int) -> list[int]:
        """``select`` after the label keys ``changed``: only profiles reading those keys are re-checked."""
        affected: set[int] = set()
        for k in changed:
            affected.update(self.by_key.get(k, ()))
        if not affected:
            return previous
        kept = [i for i in previous if i not in affected]
        kept.extend(i for i in affected if self._passes(i, labels, draw))
        kept.sort()
        return kept


class ProfileSet:
    """Every profile of one cluster-state generation, as the state compiled and judged them
    (``ClusterState.colocation_profiles``), with per-namespace views."""

    def __init__(self, profiles: list[Profile]) -> None:
        self.profiles = profiles
        self._views: dict[str, tuple[Mapping[str, str], NamespaceProfiles]] = {}

    def for_namespace(self, namespace: str, ns_labels: Mapping[str, str]) -> NamespaceProfiles:
        """The profiles whose namespaceSelector takes these labels; kept per namespace while its labels stay (a
        change of one namespace's labels rebuilds that namespace's view, not the compiled profiles)."""
        cached = self._views.get(namespace)
        view = cached[1] if cached is not None and cached[0] == ns_labels else None
        if view is None:
            candidates, broken = [], []
            for i, p in enumerate(self.profiles):
                if p.error is not None:
                    # Report a broken profile only where it could have applied.
                    if p.ns_selector is None or p.ns_selector.matches(ns_labels):
                        broken.append(p)
                elif p.ns_selector is None or p.ns_selector.matches(ns_labels):
                    candidates.append(i)
            view = NamespaceProfiles(self.profiles, candidates, broken)
            self._views[namespace] = (dict(ns_labels), view)
        return view


@dataclass(slots=True)
class Resolution:
    """The pod after every matching profile, re-matched until nothing changes."""

    pod: dict[str, Any]
    matched: list[Profile]
    passes: int
    settled: bool
    failed: list[tuple[Profile, str]] = field(default_factory=list)   # skipped: could not apply


def resolve(view: NamespaceProfiles, pod: dict[str, Any], draw: int,
            lookup_class: Callable[[str], dict[str, Any] | None], max_passes: int = 8) -> Resolution:
    """Apply the matching profiles in name order until the pod is a fixed point.

    Re-matching after each pass makes the result stable: the apiserver reinvokes us with our own
    output (reinvocationPolicy IfNeeded), and that must give an empty patch. Raises ApplyError(deny).
    """
    profiles = view.profiles
    cur = pod
    labels = pod_labels(cur)
    idx = view.select(labels, draw)
    failed: dict[str, tuple[Profile, str]] = {}
    for n in range(1, max_passes + 1):
        if not idx:
            return Resolution(cur, [], n, True, list(failed.values()))
        chosen = [profiles[i] for i in idx]
        tails = suffix_tails(chosen)
        new = cur
        for p, tail in zip(chosen, tails, strict=False):
            try:
                new = apply_profile(new, p, lookup_class, tail)
            except ApplyError as exc:
                if exc.deny:
                    raise
                failed[p.name] = (p, exc.message)
        if new == cur:
            return Resolution(cur, [p for p in chosen if p.name not in failed], n, True, list(failed.values()))
        new_labels = pod_labels(new)
        previous = idx
        idx = view.reselect(idx, new_labels, changed_label_keys(labels, new_labels), draw)
        if idx == previous and not failed and all(p.constant for p in chosen):
            # Same profiles, each writing fixed values: the last writer of every field is the same
            # again, so ``new`` is already the fixed point (saves the confirming pass).
            return Resolution(new, chosen, n, True, [])
        cur, labels = new, new_labels
    return Resolution(cur, [profiles[i] for i in idx if profiles[i].name not in failed], max_passes, False,
                      list(failed.values()))


def explain_match(p: Profile, namespace: str, ns_labels: Mapping[str, str] | None,
                  labels: Mapping[str, str], draw: int) -> tuple[bool, str]:
    """Whether ``p`` matches, and why, in words (for ``review --explain``)."""
    spec = p.spec
    if p.error is not None:
        return False, f"ignored, the profile is invalid: {p.error}"
    if ns_labels is None:
        return False, f"namespace {namespace} is not in the cluster state (fail closed)"
    ns_sel = spec.get("namespaceSelector")
    if p.ns_selector is not None and not p.ns_selector.matches(ns_labels):
        return False, (f"namespaceSelector {describe_selector(ns_sel)} does not match namespace {namespace} "
                       f"labels {format_labels(ns_labels)}")
    sel = spec.get("selector")
    if p.selector is not None and not p.selector.matches(labels):
        return False, f"selector {describe_selector(sel)} does not match pod labels {format_labels(labels)}"
    why = (f"namespaceSelector {describe_selector(ns_sel)} matches {namespace}; "
           f"selector {describe_selector(sel)} matches")
    if draw >= p.percent:
        return False, f"{why}; probability {p.percent}%: draw {draw} is not below {p.percent}"
    return True, f"{why}; probability {p.percent}%" + (f" (draw {draw})" if p.percent < 100 else "")


def format_labels(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in labels.items()) + "}"
