"""Fail closed for the pods a ClusterColocationProfile converts: one ValidatingAdmissionPolicy and binding per
profile, generated from the profiles of a cluster state (pure; docs/policies.md, "Admission policies").

The webhook configurations keep ``failurePolicy: Ignore``; while no replica answers, a pod a profile matches would
be admitted as the user wrote it. The binding selects what the profile selects (its namespaceSelector and selector,
minus the namespaces the webhooks skip) on CREATE, where profiles apply, and the policy refuses a pod that does not
carry the profile's outcome: its QoS label, its priorityClassName, and, when its class is in the koord-batch or
koord-mid band and the conversion is not skipped, no native cpu/memory. The outcome is checked, not a marker, so
nobody gets around it by writing an annotation, and a pod the user wrote compliant is admitted.

The values are baked into a policy per profile rather than read from the profile as a param (``paramKind``): the
band of the class is a PriorityClass's value, which CEL cannot look up, and a baked policy needs no informer on the
CRD in the apiserver and has no "param not found" case. Each object carries the digest of what it was made from,
so ``colocation-webhook policies --check`` tells an applied policy that no longer matches its profile.

Profiles that combine (all that match a pod apply, in name order, a later one winning) are allowed for: a policy
accepts the QoS class and class any profile writes (its fields, labels or patch), and checks no resources when any
profile skips the conversion. Not rendered, with a note: an invalid profile (it never applies), one with
``probability`` below 100 (a pod the draw passed over is rightly unconverted, and CEL cannot compute the draw), one
that sets neither a QoS class nor a priority class (nothing the policy could check).

The band policy (``band_policy``) does the same for the pods rule batch-resources converts without a profile: a pod
whose priority is in the koord-batch or koord-mid band still asking for cpu/memory is refused; shipped without
exceptions, rendered here with the pods of skip-update-resources profiles left out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.domain.batch_resources import TARGETS
from webhook.cluster.profiles import SKIP_UPDATE_RESOURCES, Profile
from webhook.core.names import label_value, qualified_name
from webhook.core.priority import BANDS, band_of
from webhook.core.qos import QOS_LABEL
from webhook.core.resources import CPU, LEGACY_BATCH, MEMORY
from webhook.policies.invariants import EXCLUDED_NAMESPACES, lit, lits

__all__ = ["BAND_COMPONENT", "BAND_MESSAGE", "BAND_POLICY_NAME", "COMPONENT", "DIGEST_ANNOTATION",
           "PROFILE_ANNOTATION", "SERVER_DEFAULTS", "Rendered", "Stale", "band_policy", "differences", "message",
           "render", "render_band", "selector_cel", "stale"]

PREFIX = "colocation-profile-"
COMPONENT = "profile-policy"
# Pods of a band without a profile: one policy, shipped in manifests/components/admission-policies and rendered
# again with the cluster state's skip-update-resources profiles left out.
BAND_POLICY_NAME = "colocation-band-conversion"
BAND_COMPONENT = "band-policy"
LABELS = {"app.kubernetes.io/name": "colocation-webhook", "app.kubernetes.io/part-of": "colocation-webhook",
          "app.kubernetes.io/component": COMPONENT}
PROFILE_ANNOTATION = "colocation.koordinator.sh/profile"
DIGEST_ANNOTATION = "colocation.koordinator.sh/profile-digest"
NAME_MAX = 253
# Where the webhook's conversion looks for cpu/memory (resources.resource_lists, without the RuntimeClass's
# overhead): the containers, the init containers (sidecars included) and the pod level.
_CONTAINER_FIELDS = ("initContainers", "containers")


def message(profile: str) -> str:
    return (f"the colocation webhook did not run on this pod: ClusterColocationProfile {profile} matches it, and it "
            "does not carry what the profile sets (its QoS class, priority class, or batch resources in place of "
            "cpu/memory); create it again once the webhook is back")


@dataclass(frozen=True)
class Rendered:
    """The policies and bindings of the profiles, why some profiles have none, and the band policy with the
    profiles that skip the conversion left out."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    band: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _names_any(res: str, names: str) -> str:
    """Whether the requests or limits of ``res`` (a CEL path to a ResourceRequirements) name one of ``names``."""
    return " || ".join(f"(has({res}.{kind}) && {names}.exists(n, n in {res}.{kind}))"
                       for kind in ("requests", "limits"))


def _native(band: str) -> str:
    """Whether the pod asks for cpu or memory in a container, an init container or at the pod level where the
    webhook's conversion would have taken them away. As ``batch_resources.convert_pod``, a container that already
    names the band's own resources (``band``: a CEL list of names) is left as written (its mix is the validating
    rules' business), and so is the pod level then (``fold_pod_level``)."""
    native = lits([CPU, MEMORY])
    parts = [f"(has(object.spec.{f}) && object.spec.{f}.exists(c, has(c.resources) && "
             f"({_names_any('c.resources', native)}) && !({_names_any('c.resources', band)})))"
             for f in _CONTAINER_FIELDS]
    kept = " || ".join(f"(has(object.spec.{f}) && object.spec.{f}.exists(c, has(c.resources) && "
                       f"({_names_any('c.resources', band)})))" for f in _CONTAINER_FIELDS)
    parts.append(f"(has(object.spec.resources) && ({_names_any('object.spec.resources', native)}) && !({kept}))")
    return " || ".join(parts)


def _validation(qos: list[str], classes: list[str], converting: dict[str, list[str]]) -> str:
    label = f"object.metadata.labels[{lit(QOS_LABEL)}]"
    checks = []
    if qos:
        checks.append(f"(has(object.metadata.labels) && {lit(QOS_LABEL)} in object.metadata.labels "
                      f"&& {label} in {lits(qos)})")
    if classes:
        checks.append(f"(has(object.spec.priorityClassName) && object.spec.priorityClassName in {lits(classes)})")
    if converting:
        checks.append("!(has(object.spec.priorityClassName) && object.spec.priorityClassName in variables.bandNames"
                      " && variables.asksNative)")
    return " && ".join(checks)


def _band_variables(converting: dict[str, list[str]]) -> list[dict[str, str]]:
    bands = "{" + ", ".join(f"{lit(c)}: {lits(names)}" for c, names in sorted(converting.items())) + "}"
    klass = "object.spec.priorityClassName"
    return [{"name": "bandNames", "expression": bands},
            # The band's names of the pod's class, [] for a class that is none of them: never an error to refuse on.
            {"name": "band", "expression": f"has({klass}) && {klass} in variables.bandNames "
                                           f"? variables.bandNames[{klass}] : []"},
            {"name": "asksNative", "expression": _native("variables.band")}]


def _selector_problem(sel: Any, where: str) -> str | None:
    """What the apiserver's LabelSelector validation refuses in a profile selector the webhook evaluates anyway (a
    key that is no qualified name, a value that is no label value: the webhook then just never matches it)."""
    if not isinstance(sel, dict):
        return None
    for key, value in (sel.get("matchLabels") or {}).items():
        errors = qualified_name(key) or label_value(value)
        if errors:
            return f"{where}.matchLabels[{key}]: {errors[0]}"
    for i, e in enumerate(sel.get("matchExpressions") or []):
        errors = qualified_name(e["key"]) or [err for v in e.get("values") or [] for err in label_value(v)]
        if errors:
            return f"{where}.matchExpressions[{i}]: {errors[0]}"
    return None


def _written(p: Profile) -> tuple[set[str], set[str], bool]:
    """The QoS classes and priority classes profile ``p`` can write besides ``qosClass``/``priorityClassName``
    (its labels and patch), and whether it writes the QoS label in a way no list can hold (a key mapping, a
    suffix, a patch value that is not a string)."""
    qos: set[str] = set()
    classes: set[str] = set()
    unknown = QOS_LABEL in p.label_keys_mapping.values() or QOS_LABEL in p.label_suffixes
    if QOS_LABEL in p.labels:
        qos.add(p.labels[QOS_LABEL])
    patch = p.patch or {}
    pmeta, pspec = patch.get("metadata"), patch.get("spec")
    plabels = pmeta.get("labels") if isinstance(pmeta, dict) else None
    if isinstance(plabels, dict) and (QOS_LABEL in plabels or "$patch" in plabels):
        value = plabels.get(QOS_LABEL)
        if isinstance(value, str):
            qos.add(value)
        else:
            unknown = True
    if isinstance(pspec, dict) and isinstance(pspec.get("priorityClassName"), str):
        classes.add(pspec["priorityClassName"])
    return qos, classes, unknown


def _pod_creates() -> dict[str, Any]:
    """The policies' matchConstraints: pod CREATEs, where profiles and the conversion apply."""
    return {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"], "scope": "Namespaced"}],
            "matchPolicy": "Equivalent"}


def _objects(name: str, meta: dict[str, Any], policy_spec: dict[str, Any],
             binding_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding, both named ``name``, each with its own copy of ``meta``."""
    return [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
             "metadata": {"name": name, **json.loads(json.dumps(meta))}, "spec": spec}
            for kind, spec in (("ValidatingAdmissionPolicy", policy_spec),
                               ("ValidatingAdmissionPolicyBinding", binding_spec))]


def _band_names(band: str) -> list[str]:
    """The resource names a pod of ``band`` (koord-batch, koord-mid) asks for in place of cpu/memory, the legacy
    names of those included."""
    cpu_name, mem_name = TARGETS[band]
    return [cpu_name, mem_name, *(k for k, v in LEGACY_BATCH.items() if v in (cpu_name, mem_name))]


def band_message() -> str:
    """The band policy's message as a CEL expression: the pod's priority, its band, the names it should ask for."""
    bands = " : ".join(f"object.spec.priority >= {low} && object.spec.priority <= {high} ? {lit(name)}"
                       for name, low, high in BANDS if name in TARGETS)
    head = lit("the colocation webhook did not run on this pod: its priority ")
    tail = lit(" in place of cpu and memory, and it still asks for cpu or memory; create it again once the webhook "
               "is back")
    return (f"{head} + string(object.spec.priority) + ' is in the ' + ({bands} : '') "
            f"+ ' band, whose pods ask for ' + variables.band[0] + ' and ' + variables.band[1] + {tail}")


# Where a messageExpression cannot be used (it errs, or its text is too long).
BAND_MESSAGE = ("the colocation webhook did not run on this pod: its priority is in the koord-batch or koord-mid "
                "band, whose pods ask for batch or mid resources in place of cpu and memory, and it still asks for "
                "cpu or memory; create it again once the webhook is back")


def _label_in(labels: str, key: str) -> str:
    return f"(has({labels}) && {lit(key)} in {labels})"


def selector_cel(sel: Any, labels: str) -> str:
    """A LabelSelector (``selectors.matches``' semantics; none or empty selects everything) as a CEL test of the
    label map at ``labels``."""
    sel = sel if isinstance(sel, dict) else {}
    parts = [f"({_label_in(labels, k)} && {labels}[{lit(k)}] == {lit(v)})"
             for k, v in (sel.get("matchLabels") or {}).items()]
    for e in sel.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], list(e.get("values") or [])
        has_key = _label_in(labels, key)
        parts.append({"In": f"({has_key} && {labels}[{lit(key)}] in {lits(values)})",
                      "NotIn": f"!({has_key} && {labels}[{lit(key)}] in {lits(values)})",
                      "Exists": has_key, "DoesNotExist": f"!{has_key}"}[op])
    return " && ".join(parts) or "true"


def band_policy(skipping: list[Profile]) -> list[dict[str, Any]]:
    """The policy and binding that refuse a pod of the koord-batch or koord-mid band (by ``spec.priority``, which
    the Priority plugin sets before validating admission) still asking for cpu/memory where rule batch-resources
    would have converted them, except where a profile of ``skipping`` (those carrying SKIP_UPDATE_RESOURCES)
    matches the pod: the webhook leaves those as written (docs/policies.md, "Admission policies")."""
    ranges = [(name, low, high) for name, low, high in BANDS if name in TARGETS]
    band = " : ".join(f"object.spec.priority >= {low} && object.spec.priority <= {high} ? {lits(_band_names(name))}"
                      for name, low, high in ranges)
    variables = [{"name": "band", "expression": f"has(object.spec.priority) ? ({band} : []) : []"}]
    skipped = [f"({selector_cel(p.spec.get('namespaceSelector'), 'namespaceObject.metadata.labels')} && "
               f"{selector_cel(p.spec.get('selector'), 'object.metadata.labels')})" for p in skipping]
    if skipped:
        variables.append({"name": "skipped", "expression": " || ".join(skipped)})
    variables.append({"name": "asksNative", "expression": _native("variables.band")})
    refuse = "size(variables.band) > 0 && variables.asksNative" + (" && !variables.skipped" if skipped else "")
    policy_spec = {
        "failurePolicy": "Fail",
        "matchConstraints": _pod_creates(),
        "variables": variables,
        "validations": [{"expression": f"!({refuse})", "messageExpression": band_message(),
                         "message": BAND_MESSAGE, "reason": "Forbidden"}],
    }
    binding_spec = {
        "policyName": BAND_POLICY_NAME,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}]}},
    }
    notes = {PROFILE_ANNOTATION: ",".join(p.name for p in skipping)} if skipping else {}
    meta = {"labels": {**LABELS, "app.kubernetes.io/component": BAND_COMPONENT},
            "annotations": {**notes, DIGEST_ANNOTATION: _digest(policy_spec, binding_spec)}}
    return _objects(BAND_POLICY_NAME, meta, policy_spec, binding_spec)


def _selector(sel: Any) -> dict[str, Any]:
    return json.loads(json.dumps(sel)) if isinstance(sel, dict) else {}


def _digest(policy_spec: dict[str, Any], binding_spec: dict[str, Any]) -> str:
    text = json.dumps([policy_spec, binding_spec], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pair(p: Profile, validation: str, variables: list[dict[str, str]]) -> list[dict[str, Any]]:
    name = PREFIX + p.name
    ns_selector = _selector(p.spec.get("namespaceSelector"))
    excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}
    ns_selector["matchExpressions"] = [*ns_selector.get("matchExpressions", []), excluded]
    policy_spec = {
        # Fail: an expression that errs refuses rather than admits the pod unconverted.
        "failurePolicy": "Fail",
        "matchConstraints": _pod_creates(),
        "validations": [{"expression": validation, "message": message(p.name), "reason": "Forbidden"}],
    }
    if variables:
        policy_spec["variables"] = variables
    binding_spec: dict[str, Any] = {
        "policyName": name,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": ns_selector, "objectSelector": _selector(p.spec.get("selector"))},
    }
    meta = {"labels": dict(LABELS), "annotations": {PROFILE_ANNOTATION: p.name,
                                                     DIGEST_ANNOTATION: _digest(policy_spec, binding_spec)}}
    return _objects(name, meta, policy_spec, binding_spec)


def render(profiles: list[Profile], lookup_class: Callable[[str], dict[str, Any] | None]) -> Rendered:
    """The policy and binding of each profile that can have one (name order), and a note per profile left out.
    ``profiles``: as the cluster state compiled and judged them (``ClusterState.colocation_profiles``: one it
    holds marked has the mark as its error); ``lookup_class``: a PriorityClass by name (its value decides the
    band)."""
    compiled = sorted(profiles, key=lambda p: p.name)
    valid = [p for p in compiled if p.error is None and p.percent > 0]
    # A pod two profiles match gets the later one's class and QoS class, and no conversion when either skips it:
    # each policy accepts what any profile sets, through qosClass/priorityClassName, its labels or its patch.
    any_skip = {p.name for p in valid if p.skip_update_resources}
    all_qos = {p.qos_class for p in valid if p.qos_class}
    all_classes = {p.priority_class_name for p in valid if p.priority_class_name}
    qos_unknown: list[str] = []
    for q in valid:
        more_qos, more_classes, unknown = _written(q)
        all_qos |= more_qos
        all_classes |= more_classes
        if unknown:
            qos_unknown.append(q.name)
    out = Rendered()
    for p in compiled:
        if p.error is not None:
            out.notes.append(f"{p.name}: no policy: the profile is invalid and never applies: {p.error}")
            continue
        if p.percent < 100:
            out.notes.append(f"{p.name}: no policy: probability {p.percent}% (a pod the draw passes over is rightly "
                             "unconverted, and a policy cannot compute the draw)")
            continue
        problem = (_selector_problem(p.spec.get("namespaceSelector"), "namespaceSelector")
                   or _selector_problem(p.spec.get("selector"), "selector"))
        if problem is not None:
            out.notes.append(f"{p.name}: no policy: a binding cannot hold its selector: {problem}")
            continue
        if len(PREFIX + p.name) > NAME_MAX:
            out.notes.append(f"{p.name}: no policy: the name {PREFIX}{p.name} is longer than {NAME_MAX} characters")
            continue
        qos = sorted(all_qos) if p.qos_class and not qos_unknown else []
        if p.qos_class and qos_unknown:
            out.notes.append(f"{p.name}: no QoS class check: profile(s) {', '.join(qos_unknown)} write "
                             f"{QOS_LABEL} through a key mapping, a suffix or a patch")
        classes = sorted(all_classes) if p.priority_class_name else []
        if not (qos or classes):
            out.notes.append(f"{p.name}: no policy: it sets neither qosClass nor priorityClassName, nothing a "
                             "policy could check")
            continue
        converting: dict[str, list[str]] = {}
        if p.priority_class_name and not any_skip:
            for c in classes:
                pc = lookup_class(c)
                value = pc.get("value") if pc is not None else None
                if pc is None and c == p.priority_class_name:
                    out.notes.append(f"{p.name}: PriorityClass {c} is not in the cluster state: the webhook refuses "
                                     "the pods this profile matches; the policy checks no resources")
                if isinstance(value, int) and not isinstance(value, bool) and band_of(value) in TARGETS:
                    converting[c] = _band_names(band_of(value))
        elif p.priority_class_name:
            out.notes.append(f"{p.name}: no resources check: profile(s) {', '.join(sorted(any_skip))} carry "
                             f"{SKIP_UPDATE_RESOURCES}")
        out.objects.extend(_pair(p, _validation(qos, classes, converting),
                                 _band_variables(converting) if converting else []))
    skipping = [p for p in valid if p.skip_update_resources]
    if skipping:
        out.notes.append(f"{BAND_POLICY_NAME}: the pods profile(s) {', '.join(p.name for p in skipping)} match are "
                         f"left out ({SKIP_UPDATE_RESOURCES}): the shipped policy refuses them, apply this one")
    out.band.extend(band_policy(skipping))
    return out


@dataclass(frozen=True)
class Stale:
    """An applied policy or binding that is not what the profiles render now."""

    name: str
    kind: str
    problem: str


# What the apiserver writes into a policy or binding it stores where the object leaves a field out
# (k8s.io/kubernetes/pkg/apis/admissionregistration/v1/defaults.go): not a difference.
SERVER_DEFAULTS: dict[str, Any] = {"failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {},
                                   "objectSelector": {}, "scope": "*"}


def differences(want: Any, have: Any, path: str = "spec") -> list[str]:
    """Where the applied ``have`` differs from the rendered ``want``, field by field (the fields the apiserver
    defaults excepted), as ``path: what``."""
    if isinstance(want, dict) and isinstance(have, dict):
        out: list[str] = []
        for k, v in want.items():
            out.extend([f"{path}.{k}: missing"] if k not in have else differences(v, have[k], f"{path}.{k}"))
        out.extend(f"{path}.{k}: not rendered" for k, v in have.items()
                   if k not in want and not (k in SERVER_DEFAULTS and SERVER_DEFAULTS[k] == v))
        return out
    if isinstance(want, list) and isinstance(have, list):
        if len(want) != len(have):
            return [f"{path}: {len(have)} item(s), rendered {len(want)}"]
        return [d for i, (w, h) in enumerate(zip(want, have, strict=True)) for d in differences(w, h, f"{path}[{i}]")]
    return [] if want == have else [f"{path}: differs"]


def stale(rendered: list[dict[str, Any]], applied: list[dict[str, Any]],
          components: tuple[str, ...] | None = None) -> list[Stale]:
    """Compare the applied policies and bindings with the rendered ones, field by field: ``rendered`` is all this
    command renders; the applied ones it judges are those of the same kind and name, and any other carrying one of
    the ``components`` labels (default: the profile and band policies'; left over)."""
    left_over = components if components is not None else (COMPONENT, BAND_COMPONENT)
    def key(o: dict[str, Any]) -> tuple[str, str]:
        return o.get("kind", ""), str((o.get("metadata") or {}).get("name", ""))

    def what(o: dict[str, Any]) -> str:
        profile = ((o.get("metadata") or {}).get("annotations") or {}).get(PROFILE_ANNOTATION)
        labels = (o.get("metadata") or {}).get("labels") or {}
        return (f"profile {profile}: " if profile and labels.get("app.kubernetes.io/component") == COMPONENT
                else "")

    want = {key(o): o for o in rendered}
    have = {key(o): o for o in applied if isinstance(o, dict) and (
        key(o) in want
        or ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component") in left_over)}
    out: list[Stale] = []
    for k, o in want.items():
        if k not in have:
            out.append(Stale(k[1], k[0], f"{what(o)}not applied"))
            continue
        found = differences(o.get("spec"), have[k].get("spec"))
        if found:
            shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
            out.append(Stale(k[1], k[0], f"{what(o)}stale: {shown} (edited in the cluster, or the cluster state "
                                         "changed since it was applied)"))
    for k, o in have.items():
        if k not in want:
            out.append(Stale(k[1], k[0], f"{what(o)}gone or no longer rendered: delete it"))
    return sorted(out, key=lambda s: (s.name, s.kind))


BAND_HEADER = """\
# Generated by `colocation-webhook policies` (webhook/policies/profiles.py, band_policy): do not edit;
# tests/policies/test_profiles.py fails when this file and the generator differ. With profiles that carry
# config.koordinator.sh/skip-update-resources, apply the copy `colocation-webhook policies --cluster-state/--kubeconfig`
# renders instead: it leaves the pods those profiles match alone, as the webhook does.
"""


def render_band() -> str:
    """The band policy with no profile left out, as committed in manifests/components/admission-policies."""
    import yaml  # a dependency of the CLI already; imported here so the module's import stays cheap

    return BAND_HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in band_policy([]))


if __name__ == "__main__":
    print(render_band(), end="")
