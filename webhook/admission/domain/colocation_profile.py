"""ClusterColocationProfile: compiling, matching, the probability draw and what one profile does to a pod.

Semantics follow Koordinator (``apis/config/v1alpha1/cluster_colocation_profile_types.go``,
``pkg/webhook/pod/mutating/cluster_colocation_profile.go``) with our deliberate deviations
(docs/admission-rules-mutating.md, "Where we differ from Koordinator on purpose"): matching fails closed (an unknown
namespace or a bad selector, probability or field means no match, with a reason; so does a field whose output the
apiserver would refuse on the pod), and ``probability: 50`` gives each pod a 50 % chance (Koordinator: 51 %), drawn
once per pod so that every (re)invocation gets the same answer (``pod_draw``).

Pure functions over plain dicts; a transformed pod shares every untouched subtree with its input.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.domain.strategic_merge import StrategicMergeError, clone, merge
from webhook.core.fielderrors import invalid
from webhook.core.names import (
    LABEL_MAX,
    dns1123_subdomain,
    label_value,
    max_len_error,
    qualified_name,
    regex_error,
)
from webhook.core.priority import SUB_PRIORITY_LABEL, preemption_policy_of
from webhook.core.qos import KOORD_QOS_CLASSES, QOS_LABEL
from webhook.core.resources import as_object, pod_shape_error
from webhook.core.selectors import CompiledSelector, SelectorError, compile_selector, describe_selector

SKIP_UPDATE_RESOURCES = "config.koordinator.sh/skip-update-resources"
# The probability draw of a pod created without a name (see ``pod_draw``).
DRAW_ANNOTATION = "colocation.koordinator.sh/probability-draw"
_PERCENT = re.compile(r"^([0-9]+)%$")
# A profile patch may not rename or move the pod: the draw and the apiserver depend on them.
_IDENTITY_FIELDS = ("name", "generateName", "namespace")


class ProfileError(ValueError):
    """A profile field that makes the profile unusable (it then never matches)."""


class ApplyError(ValueError):
    """A profile that cannot be applied to this pod; ``deny`` marks the upstream Forbidden cases."""

    def __init__(self, message: str, deny: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.deny = deny


def parse_probability(value: Any) -> int:
    """Percent (0..100) from ``probability``: unset = 100, an integer, or "NN%". Anything else, 150 included, is a
    bad value: the profile is refused, as our CRD refuses it, never clamped to 100 (Koordinator applies it)."""
    if value is None:
        return 100
    if isinstance(value, int) and not isinstance(value, bool):
        percent = value
    elif isinstance(value, str):
        if not _PERCENT.match(value):  # upstream's IsValidPercent
            raise ProfileError(invalid("spec.probability", value, regex_error(
                "a valid percent string must be a numeric string followed by an ending '%'", "[0-9]+%", "1%", "93%")))
        percent = int(value[:-1])
    else:  # the apps validation's text for an IntOrString that is neither; the value as JSON shows it (true, 0.5)
        raise ProfileError(f"spec.probability: Invalid value: {json.dumps(value)}: must be an integer or percentage "
                           "(e.g '5%')")
    if not 0 <= percent <= 100:
        raise ProfileError(invalid("spec.probability", value, "must be between 0 and 100, inclusive"))
    return percent


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
    brings another uid. Raises ProfileError for a recorded draw that is not one.
    """
    recorded = annotations.get(DRAW_ANNOTATION)
    if recorded is not None:
        if not (isinstance(recorded, str) and recorded.isascii() and recorded.isdigit() and int(recorded) < 100):
            raise ProfileError(invalid(f"metadata.annotations[{DRAW_ANNOTATION}]", recorded,
                                       "must be an integer from 0 to 99 (the pod's probability draw)"))
        return int(recorded), False
    if name:
        return probability_draw(namespace, name), False
    return probability_draw(namespace, f"{generate_name}{request_uid}"), True


def _check(path: str, value: Any, errors: list[str]) -> None:
    """The first of apimachinery's messages about ``value``, as the apiserver would word it for ``path``."""
    if errors:
        raise ProfileError(invalid(path, value, errors[0]))


def _check_labels(path: str, labels: Mapping[str, Any]) -> None:
    """Label keys and values the apiserver would refuse on the pod (``ValidateLabels``); None deletes (a patch)."""
    for key, value in labels.items():
        _check(f"{path}[{key}]", key, qualified_name(key))
        if isinstance(value, str):
            _check(f"{path}[{key}]", value, label_value(value))


def _check_annotation_keys(path: str, keys: Iterable[str]) -> None:
    """``ValidateAnnotations``: each key, lower-cased, is a qualified name."""
    for key in keys:
        _check(f"{path}[{key}]", key, qualified_name(key.lower()))


def _check_suffixes(path: str, suffixes: Mapping[str, str]) -> None:
    """A suffix appended to any valid value must leave a valid one: its own characters and end decide that."""
    for key, suffix in suffixes.items():
        if len(suffix.encode()) >= LABEL_MAX:  # appended to a value of one character at least
            raise ProfileError(invalid(f"{path}[{key}]", suffix, max_len_error(LABEL_MAX)))
        if suffix:
            _check(f"{path}[{key}]", suffix, label_value("0" + suffix))


def _check_patch(patch: dict[str, Any]) -> None:
    """What the patch writes where the apiserver checks names: labels, annotation keys, the scheduler and class."""
    meta = patch.get("metadata")
    if isinstance(meta, dict):
        if isinstance(meta.get("labels"), dict):
            _check_labels("spec.patch.metadata.labels", {k: v for k, v in meta["labels"].items() if k != "$patch"})
        if isinstance(meta.get("annotations"), dict):
            _check_annotation_keys("spec.patch.metadata.annotations",
                                   [k for k in meta["annotations"] if k != "$patch"])
    pspec = patch.get("spec")
    if isinstance(pspec, dict):
        for fname in ("schedulerName", "priorityClassName"):
            v = pspec.get(fname)
            if isinstance(v, str) and v:
                _check(f"spec.patch.spec.{fname}", v, dns1123_subdomain(v))


def _string_map(spec: Mapping[str, Any], name: str) -> dict[str, str]:
    value = spec.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ProfileError(f"{name}: must be a map of strings")
    return dict(value)


@dataclass(slots=True)
class Profile:
    """A ClusterColocationProfile checked once: what it selects and what it sets."""

    name: str
    obj: dict[str, Any]
    error: str | None = None                      # set: the profile never matches
    ns_selector: CompiledSelector | None = None
    selector: CompiledSelector | None = None
    percent: int = 100
    skip_update_resources: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    label_keys_mapping: dict[str, str] = field(default_factory=dict)
    annotation_keys_mapping: dict[str, str] = field(default_factory=dict)
    label_suffixes: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    qos_class: str = ""
    priority_class_name: str = ""
    koordinator_priority: int | None = None
    patch: dict[str, Any] | None = None

    @property
    def constant(self) -> bool:
        """Only sets fixed values (no mapping, suffix or patch): applying it twice equals once."""
        return not (self.label_keys_mapping or self.annotation_keys_mapping or self.label_suffixes
                    or self.patch is not None)

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, dict) else {}


def compile_profile(obj: dict[str, Any]) -> Profile:
    """Check every field once; a bad one leaves ``error`` set and the profile never matches."""
    meta = as_object(obj.get("metadata"))
    p = Profile(name=str(meta.get("name") or ""), obj=obj)
    p.skip_update_resources = SKIP_UPDATE_RESOURCES in (meta.get("annotations") or {})
    spec = obj.get("spec", {})
    try:
        if not isinstance(spec, dict):
            raise ProfileError(f"spec: must be an object, got {type(spec).__name__}")
        try:
            p.ns_selector = compile_selector(spec.get("namespaceSelector"), "namespaceSelector")
            p.selector = compile_selector(spec.get("selector"), "selector")
        except SelectorError as bad:  # its own name: a compiled function types each name once
            raise ProfileError(str(bad)) from None
        p.percent = parse_probability(spec.get("probability"))
        p.labels = _string_map(spec, "labels")
        p.annotations = _string_map(spec, "annotations")
        p.label_keys_mapping = _string_map(spec, "labelKeysMapping")
        p.annotation_keys_mapping = _string_map(spec, "annotationKeysMapping")
        p.label_suffixes = _string_map(spec, "labelSuffixes")
        # What the profile writes must be what the apiserver accepts on a pod: refused here, once, naming the
        # field, rather than every pod it matches failing after the webhooks.
        _check_labels("spec.labels", p.labels)
        _check_annotation_keys("spec.annotations", p.annotations)
        for old_key, new_key in p.label_keys_mapping.items():
            _check(f"spec.labelKeysMapping[{old_key}]", new_key, qualified_name(new_key))
        for old_key, new_key in p.annotation_keys_mapping.items():
            _check(f"spec.annotationKeysMapping[{old_key}]", new_key, qualified_name(new_key.lower()))
        _check_suffixes("spec.labelSuffixes", p.label_suffixes)
        for fname in ("schedulerName", "qosClass", "priorityClassName"):
            v = spec.get(fname)
            if v is not None and not isinstance(v, str):
                raise ProfileError(f"{fname}: must be a string, got {v!r}")
        p.scheduler_name = spec.get("schedulerName") or ""
        for fname in ("schedulerName", "priorityClassName"):
            if spec.get(fname):
                _check(f"spec.{fname}", spec[fname], dns1123_subdomain(spec[fname]))
        p.qos_class = spec.get("qosClass") or ""
        if p.qos_class and p.qos_class not in KOORD_QOS_CLASSES:
            raise ProfileError(f"qosClass: Unsupported value: {p.qos_class!r}: supported values: "
                               + ", ".join(f'"{q}"' for q in KOORD_QOS_CLASSES))
        p.priority_class_name = spec.get("priorityClassName") or ""
        kp = spec.get("koordinatorPriority")
        if kp is not None and (not isinstance(kp, int) or isinstance(kp, bool) or not -2**31 <= kp < 2**31):
            raise ProfileError(f"koordinatorPriority: must be a 32-bit integer, got {kp!r}")
        if kp is not None:  # written as the label koordinator.sh/priority: a negative number is no label value
            _check("spec.koordinatorPriority", kp, label_value(str(kp)))
        p.koordinator_priority = kp
        patch = spec.get("patch")
        if patch is not None:
            if not isinstance(patch, dict):
                raise ProfileError(f"patch: must be an object (a strategic merge patch), got {type(patch).__name__}")
            patch = clone(patch)
            pmeta = patch.get("metadata")
            if isinstance(pmeta, dict):
                for f in _IDENTITY_FIELDS:
                    if f in pmeta:
                        raise ProfileError(f"patch.metadata.{f}: a profile may not change the pod's {f}")
            _check_patch(patch)
            p.patch = patch or None
    except ProfileError as exc:
        p.error = str(exc)
    return p


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
    for f in _IDENTITY_FIELDS:
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
    """Every profile of one cluster-state generation, compiled once, with per-namespace views."""

    def __init__(self, objects: list[dict[str, Any]], invalid: Mapping[str, str] | None = None,
                 last: ProfileSet | None = None) -> None:
        """``invalid``: profile name -> why its source rejected it (an unknown field); such a profile never applies.
        ``last``: the set before a change; a profile whose object is the very same one is not compiled again
        (a source replaces the object of a changed profile, and leaves the others as they were)."""
        kept = last._compiled if last is not None else {}
        self._compiled: dict[int, tuple[dict[str, Any], Profile]] = {}
        for o in objects:
            old = kept.get(id(o))
            self._compiled[id(o)] = (o, old[1] if old is not None and old[0] is o else compile_profile(o))
        self.profiles = []
        for _, compiled in self._compiled.values():
            if invalid and compiled.name in invalid:
                # A copy carries the mark: the compiled profile is kept for a later set, where it may be fixed.
                compiled = copy.copy(compiled)
                compiled.error = invalid[compiled.name]
            self.profiles.append(compiled)
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
