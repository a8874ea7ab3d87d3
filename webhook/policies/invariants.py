"""The stateless validating rules as one ValidatingAdmissionPolicy, built from the rules' own constants (pure).

The webhook's validating chain (``chain.VALIDATING``) is the rule source; this module writes the CEL that gives the
same verdicts and texts inside the apiserver, with no network hop, for when the webhook is unreachable
(``failurePolicy: Ignore``). Every name, band and message template comes from the modules the rules use, so a
change there changes the policy; ``tests/policies/test_invariants.py`` checks the committed manifest
(manifests/components/admission-policies) is what ``render`` prints and that the verdicts agree with the chain.

One validation per rule, in chain order: the apiserver reports the first failed validation, the webhook its first
denying rule. What the policy leaves to the webhook (docs/policies.md, "Admission policies"): the quota rules (they
need cluster state), and whether an LSR/LSE pod's total cpu request is a whole number of cpus (a sum over the
containers, with the init containers' peak: CEL in the apiserver has no fold over a list of quantities).

Ratcheting (``domain.ratchet``): on UPDATE each rule's findings about ``oldObject`` are computed too, and only a
finding the old object did not carry is refused; Koordinator's immutable fields are refused always.

The policy sees what a webhook sees after the apiserver decoded the pod: quantities as strings, and nothing the
apiserver's own validation refuses (a value that is no quantity, a negative request): those never reach a validating
admission step. The webhook meets a map's keys in the order the apiserver sends them (sorted by its JSON encoder);
the policy never iterates a map, it reads the names through sorted constant lists, so both name the same first one.
"""

from __future__ import annotations

from typing import Any

from webhook.admission.domain.batch_mixing import MIXING_ADVICE, POD_LEVEL_ADVICE, PROTOCOL_ADVICE
from webhook.admission.domain.batch_units import CPU_WHOLE, MEMORY_WHOLE, NEGATIVE
from webhook.admission.domain.koordinator_rules import (
    CPU_PATH,
    CPU_REQUIRED,
    FORBIDDEN_COMBINATIONS,
    FORBIDDEN_PAIR,
    IMMUTABLE,
    NEEDS_BE,
)
from webhook.core.fielderrors import forbidden, required
from webhook.core.priority import (
    BANDS,
    KOORD_BATCH,
    KOORD_FREE,
    KOORD_MID,
    KOORD_NONE,
    KOORD_PROD,
    PRIORITY_CLASS_LABEL,
    SUB_PRIORITY_LABEL,
)
from webhook.core.qos import KOORD_QOS_CLASSES, LEGACY_QOS_ANNOTATION, QOS_LABEL
from webhook.core.resources import (
    BATCH_CPU,
    BATCH_NAMES,
    CPU,
    LEGACY_BATCH,
    NATIVE_RESOURCES,
    OVERHEAD,
    POD_LEVEL_OWNER,
)

__all__ = ["BINDING_NAME", "EXCLUDED_NAMESPACES", "FALLBACK", "MAX_MESSAGE_BYTES", "POLICY_NAME", "SEPARATOR",
           "binding", "policy", "render", "validations", "variables"]

POLICY_NAME = BINDING_NAME = "colocation-pod-invariants"
# The namespaces the webhooks skip (manifests/base/webhook-configurations.yaml): the binding skips the same.
EXCLUDED_NAMESPACES = ("kube-system", "koordinator-system", "colocation-system")
LABELS = {"app.kubernetes.io/name": "colocation-webhook", "app.kubernetes.io/part-of": "colocation-webhook"}
# Joins a list of texts into one string and back (CEL in a 1.30 apiserver has no flatten): no message holds it.
SEPARATOR = "\n"
# Above this a quantity's isInteger() (an int64 without loss) says nothing about wholeness; the policy leaves
# wholeness there to the webhook (1e15 milli-cores or bytes: far beyond any node).
WHOLE_CHECK_LIMIT = "1P"
# A container's fields, in the order ``resources.resource_lists`` reads them, and how its owner text starts.
CONTAINER_FIELDS = (("initContainers", "init container"), ("containers", "container"))
# The owner text and field path resource_lists gives spec.overhead, and its field for spec.resources.
OVERHEAD_OWNER, OVERHEAD_PATH, POD_LEVEL = "pod overhead", "spec.overhead", "resources"


def lit(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def lits(texts: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(lit(t) for t in texts) + "]"


def _template(text: str, **values: str) -> str:
    """A message template with ``{name}`` placeholders as a CEL concatenation of literals and expressions."""
    out: list[str] = []
    rest = text
    while rest:
        start = rest.find("{")
        if start < 0:
            out.append(lit(rest))
            break
        end = rest.index("}", start)
        if start:
            out.append(lit(rest[:start]))
        out.append(values[rest[start + 1:end]])
        rest = rest[end + 1:]
    return " + ".join(out)


def _quoted(expr: str) -> str:
    """Go's %q of a string the apiserver already validated (a quantity, a label value: no escapes needed)."""
    return f"'\"' + {expr} + '\"'"


def _invalid(path: str, value: str, detail: str) -> str:
    """``fielderrors.invalid`` with a string value, as CEL (``path``/``value``: CEL expressions)."""
    return f"{path} + ': Invalid value: ' + {_quoted(value)} + ': ' + {detail}"


def _whole(value: str) -> str:
    return f"(quantity({value}).isInteger() || quantity({value}).isGreaterThan(quantity({lit(WHOLE_CHECK_LIMIT)})))"


def _record(fields: dict[str, str]) -> str:
    """A CEL map literal of ``fields`` (name -> CEL expression), each value ``dyn``: from 1.29 the apiserver refuses
    an aggregate literal whose values differ in type (ValidateHomogeneousAggregateLiterals)."""
    return "{" + ", ".join(f"{lit(k)}: dyn({v})" for k, v in fields.items()) + "}"


def _map_of(container: str, kind: str) -> str:
    return (f"(has({container}.resources) && has({container}.resources.{kind}) "
            f"? {container}.resources.{kind} : {{}})")


def constants() -> list[dict[str, str]]:
    """The rules' names and texts the expressions share, as variables."""
    whole = {name: (CPU_WHOLE if LEGACY_BATCH.get(name, name) == BATCH_CPU else MEMORY_WHOLE).format(name=name)
             for name in BATCH_NAMES}
    return [
        {"name": "batchNames", "expression": lits(list(BATCH_NAMES))},  # unit_problems' order
        # A map's keys in the order the apiserver sends them (sorted): the order mixing_error meets them.
        {"name": "batchSorted", "expression": lits(sorted(BATCH_NAMES))},
        {"name": "nativeSorted", "expression": lits(sorted(NATIVE_RESOURCES))},
        {"name": "legacyNames", "expression": lits(list(LEGACY_BATCH))},
        {"name": "wholeText", "expression": "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in whole.items()) + "}"},
    ]


def _resource_maps(root: str) -> str:
    """``resources.resource_lists`` of ``root``, one entry per owner (init containers, containers, the pod level,
    the overhead): its owner text, field, the field path of its requests and limits (a prefix), the two maps, and
    whether they name a batch resource."""
    parts = []
    for field, kind in CONTAINER_FIELDS:
        items = f"{root}.spec.{field}"
        name = "(has(c.name) ? c.name : '')"
        index = f"string({items}.map(x, has(x.name) ? x.name : '').indexOf({name}))"
        req, lim = _map_of("c", "requests"), _map_of("c", "limits")
        entry = _record({"owner": lit(f'{kind} "') + f" + {name} + " + lit('"'), "field": lit(field),
                         "path": lit(f"spec.{field}[") + f" + {index} + " + lit("].resources."),
                         "requests": req, "limits": lim, "batchNamed": _names_batch(req, lim)})
        parts.append(f"(has({items}) ? {items}.map(c, {entry}) : [])")
    level = f"{root}.spec"
    req, lim = _map_of(level, "requests"), _map_of(level, "limits")
    entry = _record({"owner": lit(POD_LEVEL_OWNER), "field": lit(POD_LEVEL), "path": lit("spec.resources."),
                     "requests": req, "limits": lim, "batchNamed": _names_batch(req, lim)})
    parts.append(f"(has({level}.resources) ? [{entry}] : [])")
    overhead = f"{root}.spec.overhead"
    entry = _record({"owner": lit(OVERHEAD_OWNER), "field": lit(OVERHEAD), "path": lit(OVERHEAD_PATH),
                     "requests": overhead, "limits": "{}", "batchNamed": _names_batch(overhead, "{}")})
    parts.append(f"(has({overhead}) ? [{entry}] : [])")
    return " + ".join(parts)


def _names_batch(req: str, lim: str) -> str:
    """Whether either map names a batch resource: most owners name none, and then skip every batch check."""
    return f"variables.batchNames.exists(n, n in {req} || n in {lim})"


def _asked(values: str, names: str) -> str:
    """The names of list variable ``names`` that map ``values`` asks for (above 0)."""
    return f"variables.{names}.filter(n, n in {values} && sign(quantity({values}[n])) > 0)"


def _effective_positive(names: str) -> str:
    """Whether the request of one of ``names`` (its limit when there is no request: API defaulting) is above 0."""
    return (f"{names}.exists(n, n in m.requests ? sign(quantity(m.requests[n])) > 0 "
            f": (n in m.limits && sign(quantity(m.limits[n])) > 0))")


def _problems(kind: str) -> str:
    """``batch_units.unit_problems``' per-value texts for one map of owner ``m``, in BATCH_NAMES order."""
    values = f"m.{kind}"
    bad = f"sign(quantity({values}[n])) < 0 || !{_whole(values + '[n]')}"
    path = f"m.path + {lit(kind)}"
    text = (f"{path} + '[' + n + ']: Invalid value: ' + {_quoted(values + '[n]')} + ': ' + "
            f"(sign(quantity({values}[n])) < 0 ? {lit(NEGATIVE)} : variables.wholeText[n])")
    return f"variables.batchNames.filter(n, n in {values} && ({bad})).map(n, {text})"


def _over_limits() -> str:
    """The request-above-limit texts of owner ``m`` (only values that passed the checks)."""
    r, li = "m.requests[n]", "m.limits[n]"
    ok = f"sign(quantity({r})) >= 0 && {_whole(r)} && sign(quantity({li})) >= 0 && {_whole(li)}"
    text = _invalid("m.path + 'requests'", r, f"'must be less than or equal to ' + n + ' limit of ' + {li}")
    return (f"variables.batchNames.filter(n, n in m.requests && n in m.limits && {ok} "
            f"&& quantity({r}).isGreaterThan(quantity({li}))).map(n, {text})")


def _owners(p: str) -> str:
    """What the rules read of each owner of variable ``p`` + 'Maps'."""
    sep = lit(SEPARATOR)
    # spec.overhead is the RuntimeClass's (never a mix, never unit-checked): only the Koordinator checks read it.
    judged = f"m.field != {lit(OVERHEAD)}"
    batch = f"m.batchNamed && {judged}"
    entry = _record({
        "owner": "m.owner", "field": "m.field",
        "batch": f"{batch} ? {_asked('m.requests', 'batchSorted')} + {_asked('m.limits', 'batchSorted')} : []",
        "native": f"{judged} ? {_asked('m.requests', 'nativeSorted')} + {_asked('m.limits', 'nativeSorted')} : []",
        "problems": f"{batch} ? ({_problems('requests')} + {_problems('limits')}).join({sep}) : ''",
        "overLimits": f"{batch} ? {_over_limits()}.join({sep}) : ''",
        "batchRequested": f"m.batchNamed && {_effective_positive('variables.batchNames')}",
        "cpuRequested": _effective_positive(lits(["cpu"])),
    })
    return f"variables.{p}Maps.map(m, {entry})"


def _first_name(owner: str, legacy: bool) -> str:
    test = "n in variables.legacyNames" if legacy else "!(n in variables.legacyNames)"
    return f"{owner}.batch.filter(n, {test})[0]"


def _mixing(p: str) -> str:
    """``batch_mixing.mixing_error`` over the owners variable ``p`` + 'Owners': its text, '' for none."""
    owners = f"variables.{p}Owners"
    legacy = "variables.legacyNames"
    has_legacy = f"o.batch.exists(n, n in {legacy})"
    has_koord = f"o.batch.exists(n, !(n in {legacy}))"
    both_protocols = f"{owners}.filter(o, {has_legacy} && {has_koord})"
    legacy_owner, koord_owner = f"{owners}.filter(o, {has_legacy})[0]", f"{owners}.filter(o, {has_koord})[0]"
    both_kinds = f"{owners}.filter(o, size(o.batch) > 0 && size(o.native) > 0)"
    batch_owner = f"{owners}.filter(o, size(o.batch) > 0)[0]"
    native_owner = f"{owners}.filter(o, size(o.native) > 0)[0]"
    # The pod level takes no batch resource: a mix with it says where its values go instead.
    level_native = f"o.field == {lit(POD_LEVEL)} && size(o.native) > 0"
    level_owner = f"{owners}.filter(o, {level_native})[0]"
    return (
        f"{owners}.exists(o, {has_legacy}) && size({both_protocols}) > 0 "
        f"? {both_protocols}[0].owner + ' asks for both ' + {_first_name(both_protocols + '[0]', True)} + ' and ' "
        f"+ {_first_name(both_protocols + '[0]', False)} + {lit(': ' + PROTOCOL_ADVICE)} "
        f": {owners}.exists(o, {has_legacy}) && {owners}.exists(o, {has_koord}) "
        f"? {legacy_owner}.owner + ' asks for ' + {_first_name(legacy_owner, True)} + ' and ' "
        f"+ {koord_owner}.owner + ' asks for ' + {_first_name(koord_owner, False)} + {lit(': ' + PROTOCOL_ADVICE)} "
        f": !{owners}.exists(o, size(o.batch) > 0) || !{owners}.exists(o, size(o.native) > 0) ? '' "
        f": size({both_kinds}) > 0 "
        f"? {both_kinds}[0].owner + ' asks for both ' + {both_kinds}[0].batch[0] + ' and ' "
        f"+ {both_kinds}[0].native[0] + {lit(': ' + MIXING_ADVICE)} "
        f": {batch_owner}.owner + ' asks for ' + {batch_owner}.batch[0] + ' and ' "
        f"+ ({owners}.exists(o, {level_native}) "
        f"? {level_owner}.owner + ' asks for ' + {level_owner}.native[0] "
        f"+ {lit(': ' + MIXING_ADVICE + '; ' + POD_LEVEL_ADVICE)} "
        f": {native_owner}.owner + ' asks for ' + {native_owner}.native[0] + {lit(': ' + MIXING_ADVICE)})")


def _units(p: str) -> str:
    """``batch_units.unit_problems``: every per-value problem in spec order, then every request above its
    limit, as a list."""
    owners, sep = f"variables.{p}Owners", lit(SEPARATOR)
    return (f"({owners}.map(o, o.problems).filter(s, s != '').join({sep}) + {sep} "
            f"+ {owners}.map(o, o.overLimits).filter(s, s != '').join({sep})).split({sep}).filter(s, s != '')")


def _label(root: str, key: str) -> str:
    return f"(has({root}.metadata.labels) && {lit(key)} in {root}.metadata.labels)"


def _qos(root: str) -> str:
    """``qos.koord_qos_class``: the label, else the legacy annotation; '' when neither names a class."""
    classes = lits(list(KOORD_QOS_CLASSES))
    labels, annotations = f"{root}.metadata.labels", f"{root}.metadata.annotations"
    label, annotation = f"{labels}[{lit(QOS_LABEL)}]", f"{annotations}[{lit(LEGACY_QOS_ANNOTATION)}]"
    return (f"{_label(root, QOS_LABEL)} ? ({label} in {classes} ? {label} : '') "
            f": (has({annotations}) && {lit(LEGACY_QOS_ANNOTATION)} in {annotations} && {annotation} in {classes} "
            f"? {annotation} : '')")


def _priority_class(root: str) -> str:
    """``priority.koord_priority_class``: the label when set, else the band of spec.priority."""
    named = lits([KOORD_PROD, KOORD_MID, KOORD_BATCH, KOORD_FREE])
    label = f"{root}.metadata.labels[{lit(PRIORITY_CLASS_LABEL)}]"
    bands = "".join(f"{root}.spec.priority >= {low} && {root}.spec.priority <= {high} ? {lit(name)} : "
                    for name, low, high in BANDS)
    return (f"{_label(root, PRIORITY_CLASS_LABEL)} ? ({label} in {named} ? {label} : '') "
            f": (has({root}.spec.priority) ? ({bands}{lit(KOORD_NONE)}) : {lit(KOORD_NONE)})")


def _sub_priority(root: str) -> str:
    return f"{_label(root, SUB_PRIORITY_LABEL)} ? {root}.metadata.labels[{lit(SUB_PRIORITY_LABEL)}] : ''"


def _koord(p: str) -> str:
    """``koordinator_rules.pod_errors`` without the whole-cpus test (left to the webhook), as a list."""
    qos, klass, owners = f"variables.{p}Qos", f"variables.{p}Class", f"variables.{p}Owners"
    # resources.pod_requests: the containers' requests (a limit standing in for a missing one), then the pod
    # level's for what it sets (cpu, memory, hugepages: never a batch name; a missing pod-level request defaults to
    # the containers' total when above 0, else to the pod-level limit), plus the overhead. The values are not
    # negative (the apiserver's validation runs first), so a total is above 0 exactly when one of its terms is.
    containers = f"o.field != {lit(POD_LEVEL)} && o.field != {lit(OVERHEAD)}"
    containers_cpu = f"{owners}.exists(o, {containers} && o.cpuRequested)"
    overhead_cpu = f"{owners}.exists(o, o.field == {lit(OVERHEAD)} && o.cpuRequested)"
    level = f"variables.{p}Maps.exists(m, m.field == {lit(POD_LEVEL)} && "
    cpu = lit(CPU)
    level_sets_cpu = f"{level}({cpu} in m.requests || {cpu} in m.limits))"
    level_cpu = (f"{level}({cpu} in m.requests ? sign(quantity(m.requests[{cpu}])) > 0 "
                 f": ({cpu} in m.limits && ({containers_cpu} || sign(quantity(m.limits[{cpu}])) > 0))))")
    cpu_requested = f"({level_sets_cpu} ? {level_cpu} : {containers_cpu}) || {overhead_cpu}"
    checks = [f"{owners}.exists(o, o.field != {lit(POD_LEVEL)} && o.batchRequested) && {qos} != 'BE' ? "
              f"{lit(required(f'labels.{QOS_LABEL}', NEEDS_BE))} : ''"]
    for bad_qos, classes in FORBIDDEN_COMBINATIONS:
        text = forbidden("Pod", FORBIDDEN_PAIR.format(label=QOS_LABEL, qos=bad_qos, klass="{klass}"))
        checks.append(f"{qos} == {lit(bad_qos)} && {klass} in {lits(list(classes))} "
                      f"? {_template(text, klass=klass)} : ''")
    checks.append(f"{qos} in ['LSR', 'LSE'] && !({cpu_requested}) ? {lit(required(CPU_PATH, CPU_REQUIRED))} : ''")
    return f"[{', '.join(checks)}].filter(s, s != '')"


def _immutable() -> str:
    """``koordinator_rules.immutable_errors`` (UPDATE only), as a list."""
    v = "variables."
    checks = [
        f"{v}newQos != {v}oldQos ? {_invalid(lit(f'labels.{QOS_LABEL}'), v + 'newQos', lit(IMMUTABLE))} : ''",
        f"{v}newClass != {v}oldClass ? {_invalid(lit('spec.priority'), v + 'newClass', lit(IMMUTABLE))} : ''",
        f"{v}newSub != {v}oldSub ? {_invalid(lit(f'labels.{SUB_PRIORITY_LABEL}'), v + 'newSub', lit(IMMUTABLE))} : ''",
    ]
    return f"[{', '.join(checks)}].filter(s, s != '')"


def _ratcheted(p_new: str, p_old: str) -> str:
    """A rule's refused findings: on UPDATE only those the old object did not carry (``domain.ratchet``)."""
    return (f"variables.isUpdate ? variables.{p_new}.filter(e, !(e in variables.{p_old})) : variables.{p_new}")


def _aggregate(errors: str) -> str:
    """``fielderrors.aggregate`` of a list without repeats (the rules' findings have none)."""
    # string(): the apiserver wants a messageExpression's type to be exactly string, not dyn.
    return f"string(size({errors}) == 1 ? {errors}[0] : '[' + {errors}.join(', ') + ']')"


def variables() -> list[dict[str, str]]:
    out = [*constants(), {"name": "isUpdate", "expression": "request.operation == 'UPDATE'"}]
    for p, root in (("new", "object"), ("old", "oldObject")):
        guard = "" if p == "new" else "!variables.isUpdate ? [] : "
        out.append({"name": f"{p}Maps", "expression": guard + _resource_maps(root)})
    for p in ("new", "old"):
        out.append({"name": f"{p}Owners", "expression": _owners(p)})
    for p in ("new", "old"):
        guard = "" if p == "new" else "!variables.isUpdate ? '' : "
        out.append({"name": f"{p}Mix", "expression": guard + _mixing(p)})
    for p in ("new", "old"):
        guard = "" if p == "new" else "!variables.isUpdate ? [] : "
        out.append({"name": f"{p}Units", "expression": guard + _units(p)})
    for p, root in (("new", "object"), ("old", "oldObject")):
        guard = "" if p == "new" else "!variables.isUpdate ? '' : "
        out.append({"name": f"{p}Qos", "expression": guard + _qos(root)})
        out.append({"name": f"{p}Class", "expression": guard + _priority_class(root)})
        out.append({"name": f"{p}Sub", "expression": guard + _sub_priority(root)})
    for p in ("new", "old"):
        guard = "" if p == "new" else "!variables.isUpdate ? [] : "
        out.append({"name": f"{p}Koord", "expression": guard + _koord(p)})
    out.append({"name": "unitsRefused", "expression": _ratcheted("newUnits", "oldUnits")})
    out.append({"name": "koordRefused",
                "expression": f"(variables.isUpdate ? {_immutable()} : []) + ({_ratcheted('newKoord', 'oldKoord')})"})
    return out


# A static message per validation, in case its messageExpression's text is longer than the apiserver takes
# (MaxEvaluatedMessageExpressionSizeBytes, 5 KiB: a pod with dozens of refused values); the rule's name and what it
# checks, so the user can ask the webhook (``colocation-webhook review``) for the whole list.
FALLBACK = {
    "batch-mixing": "batch-mixing: the pod asks for batch resources and native cpu/memory together, or names its "
                    "batch resources in both protocols",
    "batch-units": "batch-units: batch-cpu must be whole milli-cores and batch-memory whole bytes, not negative, "
                   "requests not above limits",
    "koordinator-rules": "koordinator-rules: the pod's Koordinator QoS class, priority class or cpus break "
                         "Koordinator's rules, or an update changes one of them",
}
MAX_MESSAGE_BYTES = 5 * 1024


def validations() -> list[dict[str, str]]:
    """One per stateless rule, in ``chain.VALIDATING``'s order: the first that fails is the message."""
    return [
        {"expression": "variables.newMix == '' || (variables.isUpdate && variables.newMix == variables.oldMix)",
         "messageExpression": "string(variables.newMix)", "message": FALLBACK["batch-mixing"], "reason": "Forbidden"},
        {"expression": "size(variables.unitsRefused) == 0",
         "messageExpression": _aggregate("variables.unitsRefused"), "message": FALLBACK["batch-units"],
         "reason": "Forbidden"},
        {"expression": "size(variables.koordRefused) == 0",
         "messageExpression": _aggregate("variables.koordRefused"), "message": FALLBACK["koordinator-rules"],
         "reason": "Forbidden"},
    ]


def policy() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": dict(LABELS)},
        "spec": {
            # Fail: an expression that errs (a cost limit hit) refuses rather than lets a pod through unchecked.
            "failurePolicy": "Fail",
            "matchConstraints": {
                # pods/resize (in-place resize) is an UPDATE of the whole pod: judged, and ratcheted, as one.
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                   "resources": ["pods", "pods/resize"], "scope": "Namespaced"}],
                "matchPolicy": "Equivalent",
            },
            "variables": variables(),
            "validations": validations(),
        },
    }


def binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": BINDING_NAME, "labels": dict(LABELS)},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}]}},
        },
    }


HEADER = """\
# Generated from the validating rules by `colocation-webhook policies` (webhook/policies/invariants.py): do not
# edit; tests/policies/test_invariants.py fails when this file and the generator differ.
"""


def render() -> str:
    """The policy and its binding as one YAML stream, as committed in manifests/components/admission-policies."""
    import yaml  # a dependency of the CLI already; imported here so the module's import stays cheap

    docs = [policy(), binding()]
    return HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)


if __name__ == "__main__":
    print(render(), end="")
