"""Convert while no replica answers: MutatingAdmissionPolicies (Kubernetes 1.36, ``admissionregistration.k8s.io/v1``)
generated from the profiles and the band conversion (pure; docs/policies.md, "Mutating admission policies").

Three kinds of policy, each a JSONPatch computed in the apiserver:

- ``colocation-band-mutation``: a pod whose ``spec.priority`` is in the koord-batch or koord-mid band gets its
  cpu/memory converted as rule batch-resources converts them (``batch_resources.convert_pod``: containers, init
  containers and sidecars, requests and limits, milli-cores rounded up, a limit without a request, a container that
  already asks for another value of the band's resource left as written, the cpu/memory LimitRanger put back next
  to a converted value dropped) and, in koord-batch, the QoS label BE when it states none;
- ``colocation-profile-mutation-NAME``: one per profile that a policy can apply exactly (``mutation_notes`` says
  why the others have none), bound by the profile's own selectors: its labels, annotations, key mappings,
  suffixes, QoS class, koordinatorPriority, schedulerName and priority class, then the conversion of its class's
  band;
- ``colocation-extended-resource-spec``: the ``node.koordinator.sh/extended-resource-spec`` annotation of every
  pod asking for batch resources (``extended_resource_spec``).

The refusing ValidatingAdmissionPolicies (``profiles.py``, ``invariants.py``) stay: they run after every mutation,
so a pod these policies converted passes them and one they could not convert is refused as before.

Why the shape (docs/policies.md): the apiserver rebuilds the pod after a policy's patch and runs its own plugins
again (Priority, LimitRanger), then the policies that asked for it (``reinvocationPolicy: IfNeeded``). So a policy
that sets a priority class removes ``spec.priority`` and ``spec.preemptionPolicy`` only when the class changes (the
Priority plugin then computes them again); the band policy leaves the pods a class-setting or skipping profile
matches to that profile's policy (no order holds between policies); and the quantity library of 1.36 has no
milli-value, so a conversion rounds up from ``asApproximateFloat`` and proves its answer with quantity
comparisons.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.domain.batch_resources import LIMIT_RANGER, LIMIT_RANGER_PREFIX, TARGETS
from webhook.cluster.profiles import Profile
from webhook.core.extended_resource_spec import EXTENDED_RESOURCE_SPEC, SPEC_RESOURCES
from webhook.core.priority import BANDS, SUB_PRIORITY_LABEL, band_of
from webhook.core.qos import BAND_QOS_CLASS, LEGACY_QOS_ANNOTATION, QOS_LABEL
from webhook.core.resources import CPU, LEGACY_BATCH, MEMORY
from webhook.policies.invariants import EXCLUDED_NAMESPACES, lit, lits
from webhook.policies.profiles import selector_cel

__all__ = ["BAND_NAME", "COMPONENT", "SPEC_NAME", "MutatingRendered", "band_mutation", "conversion_variables",
           "extended_resource_spec_mutation", "profile_mutation", "profile_ops", "render_mutating", "render_static"]

API = "admissionregistration.k8s.io/v1"
COMPONENT = "mutating-policy"
BAND_NAME = "colocation-band-mutation"
SPEC_NAME = "colocation-resource-spec"
PREFIX = "colocation-profile-mutation-"
NAME_MAX = 253
LABELS = {"app.kubernetes.io/name": "colocation-webhook", "app.kubernetes.io/part-of": "colocation-webhook",
          "app.kubernetes.io/component": COMPONENT}
PROFILE_ANNOTATION = "colocation.koordinator.sh/profile"
DIGEST_ANNOTATION = "colocation.koordinator.sh/profile-digest"
# Where the conversion looks (``resources.iter_containers``): init containers (sidecars included), containers.
_FIELDS = ("initContainers", "containers")
_CONVERSIONS = ((CPU, 0), (MEMORY, 1))  # native name, index of its target in TARGETS[band]


def pointer(*parts: str) -> str:
    """A JSON pointer of constant parts (RFC 6901: ``~`` as ``~0``, ``/`` as ``~1``)."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _op(op: str, path: str, value: str | None = None) -> str:
    """A JSONPatch literal; ``path`` and ``value`` are CEL expressions."""
    return f"JSONPatch{{op: {lit(op)}, path: {path}" + (f", value: {value}" if value is not None else "") + "}"


# Variables cannot hold JSONPatch values (the type exists only in ``mutations``): the conversion's ops are
# [op, path, value] lists of strings there, made JSONPatch by ``_as_patch``; EMPTY_MAP adds an empty map.
EMPTY_MAP = "add-map"


def _raw(op: str, path: str, value: str = "''") -> str:
    return f"[{lit(op)}, {path}, {value}]"


def _as_patch(ops: str) -> str:
    return (f"{ops}.map(o, o[0] == 'remove' ? {_op('remove', 'o[1]')} : o[0] == {lit(EMPTY_MAP)} ? "
            f"{_op('add', 'o[1]', '{}')} : {_op('add', 'o[1]', 'o[2]')})")


# -- quantities: the 1.36 quantity library has no milli-value, multiply or divide ----------------------------------
def _round_up(q: str, scale: str, suffix: str) -> str:
    """The smallest whole n with ``quantity(n + suffix) >= quantity(q)``: milli-cores (``suffix`` 'm', ``scale``
    1000.0) or bytes ('' and 1.0), as ``quantity.milli_value``/``int_value`` round up. The float gives n within
    one unit; two exact comparisons settle it. ``[x].map(v, ...)[0]`` names a value once (no cel.bind in the
    CEL of 1.30)."""
    exact = (f"quantity(string(n) + {lit(suffix)}).isLessThan(x) ? n + 1 : "
             f"(n > 0 && !quantity(string(n - 1) + {lit(suffix)}).isLessThan(x) ? n - 1 : n)")
    return f"[quantity({q})].map(x, [int(x.asApproximateFloat() * {scale})].map(n, {exact})[0])[0]"


def _asks(q: str) -> str:
    return f"quantity({q}).isGreaterThan(quantity('0'))"


# -- the conversion (``batch_resources.convert_pod``) ----------------------------------------------------------------
_KINDS = ("requests", "limits")


def _key(kind: str, native: str) -> str:
    return lit(f"{kind}/{native}")


def _field_variables(fieldname: str) -> list[dict[str, str]]:
    """Per container of ``object.spec.FIELD``: its cpu/memory converted (-1: absent), what LimitRanger says it set
    there, and whether converting would write over another value of the band's resources (``_clash``)."""
    owner = "init container" if fieldname == "initContainers" else "container"
    items = f"object.spec.{fieldname}"
    suffix = fieldname[0].upper() + fieldname[1:]
    scale = {CPU: ("1000.0", "m"), MEMORY: ("1.0", "")}
    converted = ", ".join(
        f"{_key(kind, native)}: has(c.resources.{kind}) && {lit(native)} in c.resources.{kind} ? "
        f"{_round_up(f'c.resources.{kind}[{lit(native)}]', *scale[native])} : -1"
        for kind in _KINDS for native, _ in _CONVERSIONS)
    tail = {kind: f"{lit(' ' + kind[:-1] + ' for ' + owner + ' ')} + c.name" for kind in _KINDS}
    put_back = ", ".join(
        f"{_key(kind, native)}: variables.limitRanger.exists(p, p.endsWith({tail[kind]}) && "
        f"p.substring(0, size(p) - size({tail[kind]})).split(', ').exists(n, n == {lit(native)}))"
        for kind in _KINDS for native, _ in _CONVERSIONS)
    clashes = []
    for kind in _KINDS:
        values = f"{items}[i].resources.{kind}"
        for native, t in _CONVERSIONS:
            got = f"variables.converted{suffix}[i][{_key(kind, native)}]"
            back = f"variables.putBack{suffix}[i][{_key(kind, native)}]"
            target = f"variables.targets[{t}]"
            clashes.append(f"({got} >= 0 && {target} in {values} && {_asks(f'{values}[{target}]')} && "
                           f"quantity({values}[{target}]).compareTo(quantity(string({got}))) != 0 && !{back})")
            legacy = f"variables.legacy[{target}]"
            clashes.append(f"({got} >= 0 && !({target} in {values} && {back}) && {target} in variables.legacy && "
                           f"{legacy} in {values} && {_asks(f'{values}[{legacy}]')})")
    has = f"has(object.spec.{fieldname})"
    return [
        {"name": f"converted{suffix}", "expression": f"{has} ? {items}.map(c, {{{converted}}}) : []"},
        {"name": f"putBack{suffix}", "expression": f"{has} ? {items}.map(c, {{{put_back}}}) : []"},
        {"name": f"clash{suffix}", "expression": f"{has} ? lists.range(size({items})).map(i, "
                                                  f"{' || '.join(clashes)}) : []"},
    ]


def _field_ops(fieldname: str) -> str:
    """The JSONPatch ops converting every container of ``object.spec.FIELD`` but those that clash."""
    items = f"object.spec.{fieldname}"
    suffix = fieldname[0].upper() + fieldname[1:]
    r = f"{items}[i].resources"
    base = f"{lit('/spec/' + fieldname + '/')} + string(i) + {lit('/resources/')}"
    ops = []
    for kind in _KINDS:
        for native, t in _CONVERSIONS:
            got = f"variables.converted{suffix}[i][{_key(kind, native)}]"
            back = f"variables.putBack{suffix}[i][{_key(kind, native)}]"
            remove = _raw("remove", f"{base} + {lit(pointer(kind, native)[1:])}")
            add = _raw("add", f"{base} + {lit(kind + '/')} + variables.paths[{t}]", f"string({got})")
            ops.append(f"({got} >= 0 ? (variables.targets[{t}] in {r}.{kind} && {back} ? [{remove}] : "
                       f"[{remove}, {add}]) : [])")
    # A limit without a request: the request becomes the limit (``convert_resources``).
    in_kind = {(kind, t): f"(has({r}.{kind}) && (variables.targets[{t}] in {r}.{kind} || "
                          f"variables.converted{suffix}[i][{_key(kind, native)}] >= 0))"
               for kind in _KINDS for native, t in _CONVERSIONS}
    empty = _raw(EMPTY_MAP, f"{base} + 'requests'")
    ops.append(f"(!has({r}.requests) && ({in_kind['limits', 0]} || {in_kind['limits', 1]}) ? [{empty}] : [])")
    for native, t in _CONVERSIONS:
        got = f"variables.converted{suffix}[i][{_key('limits', native)}]"
        value = f"({got} >= 0 ? string({got}) : string({r}.limits[variables.targets[{t}]]))"
        add = _raw("add", f"{base} + 'requests/' + variables.paths[{t}]", value)
        ops.append(f"({in_kind['limits', t]} && !{in_kind['requests', t]} ? [{add}] : [])")
    return (f"(has({items}) ? lists.range(size({items})).map(i, variables.clash{suffix}[i] ? [] : "
            f"{' + '.join(ops)}).flatten() : [])")


def _native_at_pod_level() -> str:
    level = "object.spec.resources"
    return " || ".join(f"(has({level}.{kind}) && {lit(n)} in {level}.{kind})" for kind in _KINDS for n in (CPU, MEMORY))


_LIMIT_RANGER_VARIABLE = {
    "name": "limitRanger",
    # What LimitRanger says it set, one part per container and kind (``limit_ranger_defaults``).
    "expression": (f"has(object.metadata.annotations) && {lit(LIMIT_RANGER)} in object.metadata.annotations && "
                   f"object.metadata.annotations[{lit(LIMIT_RANGER)}].startsWith({lit(LIMIT_RANGER_PREFIX)}) ? "
                   f"object.metadata.annotations[{lit(LIMIT_RANGER)}].substring({len(LIMIT_RANGER_PREFIX)})"
                   ".split('; ') : []")}


def conversion_variables(targets: str) -> list[dict[str, str]]:
    """The variables whose last, ``conversion``, holds the JSONPatch ops converting the pod's cpu/memory to the
    names of ``targets`` (a CEL list of the band's cpu and memory names, ``[]``: no conversion), as rule
    batch-resources does; none for a pod asking for cpu/memory at the pod level (``fold_pod_level``'s cases are
    left to the refusing band policy)."""
    legacy = "{" + ", ".join(f"{lit(b)}: {lit(a)}" for a, b in LEGACY_BATCH.items()) + "}"
    out = [{"name": "targets", "expression": targets},
           {"name": "paths", "expression": "variables.targets.map(t, t.replace('~', '~0').replace('/', '~1'))"},
           {"name": "legacy", "expression": legacy},
           _LIMIT_RANGER_VARIABLE]
    for f in _FIELDS:
        out += _field_variables(f)
    ops = " + ".join(_field_ops(f) for f in _FIELDS)
    out.append({"name": "conversion", "expression": (
        f"size(variables.targets) == 0 || (has(object.spec.resources) && ({_native_at_pod_level()})) ? [] : {ops}")})
    return out


def _states_qos() -> str:
    """``qos.states_qos_class``: the label or the legacy annotation, any value."""
    return (f"((has(object.metadata.labels) && {lit(QOS_LABEL)} in object.metadata.labels) || "
            f"(has(object.metadata.annotations) && {lit(LEGACY_QOS_ANNOTATION)} in object.metadata.annotations))")


def _label_map(kind: str) -> str:
    """Ops that make ``metadata.KIND`` a map when the pod has none, so keys can be added one by one."""
    return f"(has(object.metadata.{kind}) ? [] : [{_op('add', lit(pointer('metadata', kind)), '{}')}])"


def _with_qos(qos: str) -> str:
    """The conversion and, when it converts something and the pod states no QoS class, the label ``qos`` (a CEL
    string; '' for none: koord-mid has no QoS class of its own)."""
    label = _op("add", lit(pointer("metadata", "labels", QOS_LABEL)), f"({qos})")
    return (f"{_as_patch('variables.conversion')} + (size(variables.conversion) > 0 && ({qos}) != '' && "
            f"!{_states_qos()} ? "
            f"{_label_map('labels')} + [{label}] : [])")


def _pod_creates() -> dict[str, Any]:
    return {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"], "scope": "Namespaced"}],
            "matchPolicy": "Equivalent"}


def _excluded() -> dict[str, Any]:
    return {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}


def _digest(*specs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(list(specs), sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _pair(name: str, policy_spec: dict[str, Any], binding_spec: dict[str, Any],
          annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    meta = {"labels": dict(LABELS),
            "annotations": {**(annotations or {}), DIGEST_ANNOTATION: _digest(policy_spec, binding_spec)}}
    return [{"apiVersion": API, "kind": kind, "metadata": {"name": name, **json.loads(json.dumps(meta))},
             "spec": spec}
            for kind, spec in (("MutatingAdmissionPolicy", policy_spec),
                               ("MutatingAdmissionPolicyBinding", binding_spec))]


def _policy_spec(variables: list[dict[str, str]], patch: str,
                 conditions: list[dict[str, str]] | None = None, then: tuple[str, ...] = ()) -> dict[str, Any]:
    """``then``: patches applied after ``patch``, each to the object the one before it made (the apiserver evaluates
    a policy's mutations in order, each with its variables read anew: mutating/dispatcher.go, cel/composition.go)."""
    spec: dict[str, Any] = {
        # Fail: an expression that errs refuses the pod rather than admitting it half converted.
        "failurePolicy": "Fail",
        # The apiserver's own plugins run again after a policy's patch (LimitRanger puts cpu/memory defaults back,
        # Priority computes the priority of a new class): the policy then sees their result.
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": _pod_creates(),
    }
    if conditions:
        spec["matchConditions"] = conditions
    if variables:
        names = [v["name"] for v in variables]
        assert len(set(names)) == len(names), f"a variable named twice: {names}"
        spec["variables"] = variables
    spec["mutations"] = [{"patchType": "JSONPatch", "jsonPatch": {"expression": p}} for p in (patch, *then)]
    return spec


def _converting_bands() -> list[tuple[str, int, int]]:
    return [(name, low, high) for name, low, high in BANDS if name in TARGETS]


def _targets_by_priority() -> tuple[str, str]:
    """CEL: the band's [cpu name, memory name] and its QoS class by ``spec.priority`` ([] and '' outside them)."""
    names, qos = [], []
    for name, low, high in _converting_bands():
        cond = f"object.spec.priority >= {low} && object.spec.priority <= {high}"
        names.append(f"{cond} ? {lits(list(TARGETS[name]))}")
        qos.append(f"{cond} ? {lit(BAND_QOS_CLASS.get(name, ''))}")
    return " : ".join(names) + " : []", " : ".join(qos) + " : ''"


def band_mutation(leave: list[Profile]) -> list[dict[str, Any]]:
    """The policy and binding converting a pod of the koord-batch or koord-mid band (by ``spec.priority``, which
    the Priority plugin sets before mutating admission) except where a profile of ``leave`` matches it: those set
    a class (their own policy converts for that class's band) or skip the conversion."""
    in_band = " || ".join(f"(object.spec.priority >= {low} && object.spec.priority <= {high})"
                          for _, low, high in _converting_bands())
    native = " || ".join(f"(has(c.resources.{kind}) && {lit(n)} in c.resources.{kind})"
                         for kind in _KINDS for n, _ in _CONVERSIONS)
    asks = " || ".join(f"(has(object.spec.{f}) && object.spec.{f}.exists(c, {native}))" for f in _FIELDS)
    # Only a pod with something to convert: a policy the pod gets past costs it a second pass of the apiserver's
    # plugins, even with an empty patch (docs/policies.md, "Mutating admission policies"). A pod converted once and
    # given cpu/memory back by LimitRanger still matches when the policy is called again.
    conditions = [{"name": "band", "expression": f"has(object.spec.priority) && ({in_band})"},
                  {"name": "native", "expression": asks}]
    targets, qos = _targets_by_priority()
    variables = conversion_variables(targets)
    patch = _with_qos(qos)
    if leave:
        # namespaceObject is empty in matchConditions on 1.36: the namespace selector is tested here.
        matched = " || ".join(
            f"({selector_cel(p.spec.get('namespaceSelector'), 'namespaceObject.metadata.labels')} && "
            f"{selector_cel(p.spec.get('selector'), 'object.metadata.labels')})" for p in leave)
        variables.insert(0, {"name": "left", "expression": matched})
        patch = f"variables.left ? [] : {patch}"
    spec_variables, spec_patch, _ = _resource_spec()
    binding = {"policyName": BAND_NAME, "matchResources": {"namespaceSelector": {"matchExpressions": [_excluded()]}}}
    notes = {PROFILE_ANNOTATION: ",".join(p.name for p in leave)} if leave else {}
    return _pair(BAND_NAME, _policy_spec(variables + spec_variables, patch, conditions, (spec_patch,)), binding,
                 notes)


def _json_string(expr: str) -> str:
    """A CEL string as a JSON string literal: quantities and container names need no escaping (the apiserver
    validated them), so the quotes are all."""
    return f"'\"' + {expr} + '\"'"


def extended_resource_spec_mutation() -> list[dict[str, Any]]:
    """The ``node.koordinator.sh/extended-resource-spec`` annotation (``extended_resource_spec``) of a pod written
    with batch resources. A pod a policy converts gets it from that policy's last mutation: the apiserver calls
    policies in no set order (generic/policy_source.go ranges over a map of them) and calls one again after another
    policy's patch only if it was called before (``ShouldReinvoke``, mutating/dispatcher.go), so this policy,
    left out by its matchConditions while the pod still asked for cpu/memory, would not see the converted pod.
    Matching every pod with cpu/memory instead would cost each of them a second pass of the apiserver's admission
    plugins (any policy called marks the object changed), docs/benchmarks.md, "Issue 36"."""
    variables, patch, asks = _resource_spec()
    conditions = [{"name": "batch", "expression": f"object.spec.containers.exists(c, has(c.resources) && ({asks}))"}]
    binding = {"policyName": SPEC_NAME, "matchResources": {"namespaceSelector": {"matchExpressions": [_excluded()]}}}
    return _pair(SPEC_NAME, _policy_spec(variables, patch, conditions), binding)


def _resource_spec() -> tuple[list[dict[str, str]], str, str]:
    """The annotation's variables, its patch, and the CEL of "container ``c`` asks for batch resources": the batch
    resources of each regular container, keys sorted as Go and the webhook write them, quantities as the apiserver
    hands them over (canonical: the webhook's ``quantity.canonical``), written when the text differs."""
    cs = "object.spec.containers"
    kinds = ("limits", "requests")

    def entry(c: str) -> str:
        """A container's ``"limits":{...},"requests":{...}``, the kinds and names that it has."""
        parts = []
        for kind in kinds:
            values = f"{c}.resources.{kind}"
            pairs = " + ".join(f"({lit(n)} in {values} ? [{_json_string(lit(n))} + ':' + "
                               f"{_json_string(f'{values}[{lit(n)}]')}] : [])" for n in sorted(SPEC_RESOURCES))
            some = " || ".join(f"{lit(n)} in {values}" for n in SPEC_RESOURCES)
            parts.append(f"(has({values}) && ({some}) ? [{_json_string(lit(kind))} + ':{{' + ({pairs}).join(',') "
                         "+ '}'] : [])")
        return f"({' + '.join(parts)}).join(',')"

    asks = " || ".join(f"(has(c.resources.{k}) && {lit(n)} in c.resources.{k})" for k in kinds
                       for n in SPEC_RESOURCES)
    variables = [
        {"name": "named", "expression": f"{cs}.filter(c, has(c.resources) && ({asks})).map(c, c.name)"},
        # Container names in Go's order, without a sort function: a name's rank is how many come before it.
        {"name": "sorted", "expression": "lists.range(size(variables.named)).map(r, variables.named.filter(n, "
                                         "variables.named.filter(m, m < n).size() == r)[0])"},
        {"name": "text", "expression": (
            "size(variables.sorted) == 0 ? '' : '{\"containers\":{' + variables.sorted.map(n, "
            f"{_json_string('n')} + ':{{' + {cs}.filter(c, c.name == n).map(c, {entry('c')})[0] + '}}').join(',') "
            "+ '}}'")},
        {"name": "current", "expression": (f"has(object.metadata.annotations) && {lit(EXTENDED_RESOURCE_SPEC)} in "
                                           f"object.metadata.annotations ? object.metadata.annotations"
                                           f"[{lit(EXTENDED_RESOURCE_SPEC)}] : ''")},
    ]
    set_it = _op("add", lit(pointer("metadata", "annotations", EXTENDED_RESOURCE_SPEC)), "variables.text")
    patch = (f"variables.text == '' || variables.text == variables.current ? [] : "
             f"{_label_map('annotations')} + [{set_it}]")
    return variables, patch, asks


def _read(kind: str, key: str, written: dict[str, str]) -> str:
    """The value of label/annotation ``key`` at this point of the profile (what it wrote before, else the pod's),
    '' when absent, as ``labels.get(old, "")`` reads it."""
    if key in written:
        return written[key]
    where = f"object.metadata.{kind}"
    return f"(has({where}) && {lit(key)} in {where} ? {where}[{lit(key)}] : '')"


def _present(kind: str, key: str, written: dict[str, str]) -> str:
    where = f"object.metadata.{kind}"
    return "true" if key in written else f"(has({where}) && {lit(key)} in {where})"


def _metadata_ops(p: Profile) -> list[str]:
    """``apply_profile``'s labels and annotations, in its order: the profile's values, key mappings, suffixes, the
    QoS class and koordinatorPriority (a later write of a key wins, as in the dict it updates)."""
    out: list[str] = []
    for kind, values, mapping in (("labels", p.labels, p.label_keys_mapping),
                                  ("annotations", p.annotations, p.annotation_keys_mapping)):
        written: dict[str, str] = {k: lit(v) for k, v in values.items()}
        for old, new in mapping.items():
            written[new] = _read(kind, old, written)
        ops: list[str] = []
        if kind == "labels":
            for key, suffix in p.label_suffixes.items():
                value = _read(kind, key, written)
                appended = f"({value}.endsWith({lit(suffix)}) ? {value} : {value} + {lit(suffix)})"
                if key in written:
                    written[key] = appended
                else:  # only a label the pod has gets the suffix
                    path = lit(pointer("metadata", kind, key))
                    ops.append(f"({_present(kind, key, written)} ? [{_op('add', path, appended)}] : [])")
            if p.qos_class:
                written[QOS_LABEL] = lit(p.qos_class)
            if p.koordinator_priority is not None:
                written[SUB_PRIORITY_LABEL] = lit(str(p.koordinator_priority))
        if not written and not ops:
            continue
        adds = [_op("add", lit(pointer("metadata", kind, k)), v) for k, v in written.items()]
        out += [_label_map(kind), *ops] + ([f"[{', '.join(adds)}]"] if adds else [])
    return out


def _spec_ops(p: Profile) -> list[str]:
    out = []
    if p.scheduler_name:
        out.append(f"[{_op('add', lit('/spec/schedulerName'), lit(p.scheduler_name))}]")
    if p.priority_class_name:
        klass = lit(p.priority_class_name)
        # The Priority plugin refuses a pod whose priority its class does not give, and computes both fields
        # again for a pod without them: removed only when the class changes (removed always, a pod reinvoked
        # with its class already set would be stored with no priority).
        changed = f"!(has(object.spec.priorityClassName) && object.spec.priorityClassName == {klass})"
        removals = " + ".join(f"(has(object.spec.{f}) ? [{_op('remove', lit('/spec/' + f))}] : [])"
                              for f in ("priority", "preemptionPolicy"))
        out.append(f"({changed} ? [{_op('add', lit('/spec/priorityClassName'), klass)}] + {removals} : [])")
    return out


def profile_ops(p: Profile) -> str:
    """The JSONPatch ops (CEL) of what ``apply_profile`` writes, before any conversion."""
    return " + ".join([*_metadata_ops(p), *_spec_ops(p)]) or "[]"


def profile_mutation(p: Profile, band: str | None) -> list[dict[str, Any]]:
    """The policy and binding of one profile: what ``apply_profile`` writes, then, when its class is of ``band``
    (koord-batch, koord-mid) and it does not skip the conversion, rule batch-resources' conversion."""
    name = PREFIX + p.name
    ops = [profile_ops(p)]
    variables = []
    then: tuple[str, ...] = ()
    if band is not None and not p.skip_update_resources:
        spec_variables, spec_patch, _ = _resource_spec()
        variables = conversion_variables(lits(list(TARGETS[band]))) + spec_variables
        then = (spec_patch,)
        # The profile's own QoS class comes first (``apply_profile``), then the band's where it states none.
        states = bool(p.qos_class) or QOS_LABEL in p.labels
        ops.append(_with_qos("''" if states else lit(BAND_QOS_CLASS.get(band, ""))))
    patch = " + ".join(ops) if ops else "[]"
    ns_selector = json.loads(json.dumps(p.spec.get("namespaceSelector") or {}))
    ns_selector["matchExpressions"] = [*ns_selector.get("matchExpressions", []), _excluded()]
    binding = {"policyName": name, "matchResources": {
        "namespaceSelector": ns_selector, "objectSelector": json.loads(json.dumps(p.spec.get("selector") or {}))}}
    return _pair(name, _policy_spec(variables, patch, then=then), binding, {PROFILE_ANNOTATION: p.name})


# -- which profiles a policy can apply exactly -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Needs:
    """What a label selector requires: a key with one of some values (None: any value), keys absent, keys not with
    some values."""

    values: dict[str, frozenset[str] | None]
    absent: frozenset[str]
    not_in: dict[str, frozenset[str]]


def _needs(sel: Any) -> _Needs:
    sel = sel if isinstance(sel, dict) else {}
    values: dict[str, frozenset[str] | None] = {}
    absent: set[str] = set()
    not_in: dict[str, frozenset[str]] = {}

    def need(key: str, allowed: frozenset[str] | None) -> None:
        old = values.get(key)
        values[key] = allowed if old is None else (old if allowed is None else old & allowed)

    for k, v in (sel.get("matchLabels") or {}).items():
        need(k, frozenset([v]))
    for e in sel.get("matchExpressions") or []:
        vals = frozenset(e.get("values") or [])
        if e["operator"] == "In":
            need(e["key"], vals)
        elif e["operator"] == "Exists":
            need(e["key"], None)
        elif e["operator"] == "DoesNotExist":
            absent.add(e["key"])
        elif e["operator"] == "NotIn":
            not_in[e["key"]] = not_in.get(e["key"], frozenset()) | vals
    return _Needs(values, frozenset(absent), not_in)


def _disjoint(a: _Needs, b: _Needs) -> bool:
    """Whether no label set can meet both (a sufficient test: a key with no common value, or required by one and
    absent in the other)."""
    for x, y in ((a, b), (b, a)):
        for key, allowed in x.values.items():
            if key in y.absent:
                return True
            if allowed is not None:
                other = y.values.get(key)
                if (key in y.values and other is not None and not allowed & other) or allowed <= y.not_in.get(
                        key, frozenset()):
                    return True
    return False


def _may_overlap(a: Profile, b: Profile) -> bool:
    return not (_disjoint(_needs(a.spec.get("namespaceSelector")), _needs(b.spec.get("namespaceSelector")))
                or _disjoint(_needs(a.spec.get("selector")), _needs(b.spec.get("selector"))))


def _writes(p: Profile) -> dict[str, str]:
    """The fixed values a profile writes, by field (``labels/KEY``, ``annotations/KEY``, ``spec/FIELD``)."""
    out = {f"labels/{k}": v for k, v in p.labels.items()}
    out.update({f"annotations/{k}": v for k, v in p.annotations.items()})
    if p.qos_class:
        out[f"labels/{QOS_LABEL}"] = p.qos_class
    if p.koordinator_priority is not None:
        out[f"labels/{SUB_PRIORITY_LABEL}"] = str(p.koordinator_priority)
    if p.scheduler_name:
        out["spec/schedulerName"] = p.scheduler_name
    if p.priority_class_name:
        out["spec/priorityClassName"] = p.priority_class_name
    return out


def _selected_keys(p: Profile) -> set[str]:
    n = _needs(p.spec.get("selector"))
    return set(n.values) | set(n.absent) | set(n.not_in)


def _order_matters(a: Profile, b: Profile) -> str | None:
    """Why two profiles that may match one pod give a pod no set of independent policies can (the webhook applies
    them in name order, a later one winning, and matches again after each pass), or None."""
    if a.label_keys_mapping or a.annotation_keys_mapping or a.label_suffixes or b.label_keys_mapping \
            or b.annotation_keys_mapping or b.label_suffixes:
        return "a key mapping or a suffix"
    wa, wb = _writes(a), _writes(b)
    clash = sorted(k for k in wa.keys() & wb.keys() if wa[k] != wb[k])
    if clash:
        return f"both write {clash[0]}, differently"
    if a.skip_update_resources != b.skip_update_resources:
        return "one skips the conversion, the other does not"
    return None


@dataclass(frozen=True)
class MutatingRendered:
    """The mutating policies and bindings, and why some profiles have none."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _class_band(p: Profile, lookup_class: Callable[[str], dict[str, Any] | None]) -> tuple[bool, str | None]:
    """(whether the profile's class exists, the converting band of its value or None)."""
    if not p.priority_class_name:
        return True, None
    pc = lookup_class(p.priority_class_name)
    if pc is None:
        return False, None
    value = pc.get("value")
    band = band_of(value) if isinstance(value, int) and not isinstance(value, bool) else ""
    return True, band if band in TARGETS else None


def render_mutating(profiles: list[Profile], lookup_class: Callable[[str], dict[str, Any] | None]) -> MutatingRendered:
    """The mutating policies of a cluster state: one per profile a policy applies exactly (name order), the band
    conversion leaving the pods of class-setting or skipping profiles to them, and the extended-resource-spec
    annotation. A note per profile left without one: its pods are refused by its ValidatingAdmissionPolicy
    (``profiles.render``) while the webhook is down, as before. ``profiles``: as the cluster state compiled and
    judged them (``ClusterState.colocation_profiles``)."""
    compiled = sorted(profiles, key=lambda p: p.name)
    valid = [p for p in compiled if p.error is None and p.percent > 0]
    out = MutatingRendered()
    unordered: dict[str, str] = {}
    for i, a in enumerate(valid):
        for b in valid[i + 1:]:
            if _may_overlap(a, b):
                order = _order_matters(a, b)
                if order is not None:
                    unordered.setdefault(a.name, f"it may match the pods {b.name} matches, and {order}: the "
                                                 "webhook applies them in name order, policies in none")
                    unordered.setdefault(b.name, f"it may match the pods {a.name} matches, and {order}: the "
                                                 "webhook applies them in name order, policies in none")
    for a in valid:
        written = {k.split("/", 1)[1] for k in _writes(a) if k.startswith("labels/")}
        written |= set(a.label_keys_mapping.values()) | set(a.label_suffixes)
        for b in valid:
            read = written & _selected_keys(b)
            if read and a.name != b.name:
                unordered.setdefault(a.name, f"it writes label {sorted(read)[0]}, which {b.name} selects on: the "
                                             "webhook matches again after each profile, policies do not")
    for p in compiled:
        why: str | None = None
        exists, band = _class_band(p, lookup_class)
        if p.error is not None:
            why = f"the profile is invalid and never applies: {p.error}"
        elif p.percent == 0:
            why = "probability 0%: it never applies"
        elif p.percent < 100:
            why = (f"probability {p.percent}% (the webhook draws per pod; a policy cannot compute the draw)")
        elif p.patch is not None:
            why = "it has a patch (a strategic merge patch a policy cannot apply)"
        elif not exists:
            why = f"PriorityClass {p.priority_class_name} is not in the cluster state (the webhook refuses its pods)"
        elif len(PREFIX + p.name) > NAME_MAX:
            why = f"the name {PREFIX}{p.name} is longer than {NAME_MAX} characters"
        elif p.name in unordered:
            why = unordered[p.name]
        if why is not None:
            out.notes.append(f"{p.name}: no mutating policy: {why}")
            continue
        out.objects.extend(profile_mutation(p, band))
    leave = [p for p in valid if p.priority_class_name or p.skip_update_resources]
    out.objects.extend(band_mutation(leave))
    out.objects.extend(extended_resource_spec_mutation())
    return out


HEADER = """\
# Generated by `colocation-webhook policies --mutating` (webhook/policies/mutating.py): do not edit;
# tests/policies/test_mutating.py fails when this file and the generator differ. Kubernetes 1.36 or newer
# (MutatingAdmissionPolicy v1). With profiles, apply what `colocation-webhook policies --mutating
# --cluster-state/--kubeconfig` renders instead: it adds a policy per profile and leaves their pods to them.
"""


def render_static() -> str:
    """The band conversion and the extended-resource-spec annotation with no profile, as committed in
    manifests/components/mutating-policies."""
    import yaml  # a dependency of the CLI already; imported here so the module's import stays cheap

    docs = [*band_mutation([]), *extended_resource_spec_mutation()]
    return HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)


if __name__ == "__main__":
    print(render_static(), end="")
