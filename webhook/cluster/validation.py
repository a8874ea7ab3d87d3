"""What the apiserver would refuse of an object the cluster state holds, in its words (pure).

Both sources take these checks through the one judgement of what enters the state (``webhook/cluster/intake.py``):
the files source refuses a file that holds such an object (the file and line named), the live source leaves the
object out with one warning.
A state the apiserver could never hold would otherwise be used as if it could: a PriorityClass ``value: "high"``
makes every review of its pods raise, ``value: 99999999999`` goes into ``spec.priority`` beyond int32, and
``preemptionPolicy: Sometimes`` into pods.

Two steps, as the apiserver takes them:

1. **Decoding.** The apiserver decodes the JSON into the kind's Go type first, and a value of the wrong JSON type
   stops it there with the decoder's text (sigs.k8s.io/json, a fork of ``encoding/json``):
   ``json: cannot unmarshal string into Go struct field PriorityClass.value of type int32``. Only the first such
   error is reported, as the decoder does. A quantity that does not parse is reported at its field
   (``spec.hard[cpu]: Invalid value: "abc": quantities must match ...``), as ``webhook.core.resources`` reports a
   pod's. Only the fields below are decoded: what the state keeps and the rules read; unknown fields are
   ``webhook/cluster/strict.py``'s.
2. **Validation**, each kind's ``Validate...`` function, every error in ``field.Error`` text:
   ``ValidateObjectMeta`` (k8s.io/apimachinery/pkg/api/validation/objectmeta.go: the name, the namespace, label
   keys and values, annotation keys and size) for every kind; ``ValidatePriorityClass``
   (k8s.io/kubernetes/pkg/apis/scheduling/validation/validation.go), ``ValidateNamespace``,
   ``ValidateResourceQuota``, ``ValidateLimitRange`` and ``ValidateConfigMap``
   (k8s.io/kubernetes/pkg/apis/core/validation/validation.go, with the resource name sets of
   pkg/apis/core/helper/helpers.go). A ClusterColocationProfile's spec is checked where it is compiled
   (``webhook/cluster/profiles.py``); its metadata here.

What no single object can say, the files source checks over the whole folder with the texts below: two objects of
one kind, namespace and name (``already_exists``), and a second ``globalDefault`` PriorityClass (``second_default``,
the Priority admission plugin's). Written from upstream's rules and texts; no Python library reproduces them.
"""

from __future__ import annotations

import decimal
from decimal import Decimal
from typing import Any

from webhook.core.fielderrors import duplicate, forbidden, invalid, not_supported, required, too_long
from webhook.core.names import dns1123_label, dns1123_subdomain, label_value, qualified_name, regex_error
from webhook.core.quantity import QuantityError, canonical, int_value, milli_value, parse_quantity

# Where in the object (a key or list index at each step: the files source finds the line from it) and the text.
FieldPath = tuple[str | int, ...]
FieldError = tuple[FieldPath, str]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * (1 << 10)          # objectmeta.go TotalAnnotationSizeLimitB
MAX_CONFIG_MAP_SIZE = 1 * 1024 * 1024                  # core.MaxSecretSize

# scheduling/types.go and scheduling/v1/helpers.go
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
SYSTEM_CLASS_VALUES = {"system-node-critical": 2 * HIGHEST_USER_DEFINABLE_PRIORITY + 1000,
                       "system-cluster-critical": 2 * HIGHEST_USER_DEFINABLE_PRIORITY}
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")   # in ValidatePreemptionPolicy's order

# pkg/apis/core/helper/helpers.go
QUOTA_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
                "VolumeAttributesClass", "CrossNamespacePodAffinity")
_POD_COUNT = frozenset({"pods"})
_POD_COMPUTE = frozenset({"cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"})
_PVC_COUNT = frozenset({"persistentvolumeclaims"})
_PVC_STORAGE = frozenset({"requests.storage"})
_STANDARD_QUOTA_RESOURCES = frozenset({
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.storage",
    "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "resourcequotas",
    "services", "replicationcontrollers", "secrets", "persistentvolumeclaims", "configmaps", "services.nodeports",
    "services.loadbalancers"})
_STANDARD_RESOURCES = frozenset({
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage",
    "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "resourcequotas", "services",
    "replicationcontrollers", "secrets", "configmaps", "persistentvolumeclaims", "storage", "requests.storage",
    "services.nodeports", "services.loadbalancers"})
_INTEGER_RESOURCES = frozenset({
    "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps", "persistentvolumeclaims",
    "services.nodeports", "services.loadbalancers"})
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
LIMIT_TYPES = ("Pod", "Container", "PersistentVolumeClaim")
SCOPE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_EXISTS_ONLY_SCOPES = ("BestEffort", "NotBestEffort", "Terminating", "NotTerminating", "CrossNamespacePodAffinity")
_INVALID_QUOTA_RESOURCE = "must be a standard resource for quota"
_NEGATIVE = "must be greater than or equal to 0"
_NOT_INTEGER = "must be an integer"
_CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


# -- 1. decoding -----------------------------------------------------------------------------------------------------
class GoType:
    """A Go type as the apiserver's JSON decoder meets it: ``shape`` is string, int32, bool, quantity, map, list or
    struct; ``name`` how Go prints the type; ``struct`` a struct's own name (``Go struct field <struct>.<path>``)."""

    def __init__(self, shape: str, name: str, inner: GoType | None = None,
                 fields: dict[str, GoType] | None = None, struct: str = "") -> None:
        self.shape = shape
        self.name = name
        self.inner = inner
        self.fields = fields or {}
        self.struct = struct


def _named(name: str) -> GoType:
    return GoType("string", name)


def _map(value: GoType, name: str = "") -> GoType:
    return GoType("map", name or f"map[string]{value.name}", inner=value)


def _list(item: GoType) -> GoType:
    return GoType("list", f"[]{item.name}", inner=item)


def _struct(name: str, fields: dict[str, GoType]) -> GoType:
    return GoType("struct", f"v1.{name}", fields=fields, struct=name)


_STRING = GoType("string", "string")
_BOOL = GoType("bool", "bool")
_INT32 = GoType("int32", "int32")
_RESOURCE_LIST = _map(GoType("quantity", "resource.Quantity"), "v1.ResourceList")
_META = _struct("ObjectMeta", {"name": _STRING, "generateName": _STRING, "namespace": _STRING,
                               "labels": _map(_STRING), "annotations": _map(_STRING)})
# The Go types of the kinds (k8s.io/api), as far as the state reads them.
SCHEMAS: dict[str, GoType] = {
    "PriorityClass": _struct("PriorityClass", {
        "metadata": _META, "value": _INT32, "globalDefault": _BOOL, "description": _STRING,
        "preemptionPolicy": _named("v1.PreemptionPolicy")}),
    "Namespace": _struct("Namespace", {"metadata": _META}),
    "ResourceQuota": _struct("ResourceQuota", {
        "metadata": _META,
        "spec": _struct("ResourceQuotaSpec", {
            "hard": _RESOURCE_LIST,
            "scopes": _list(_named("v1.ResourceQuotaScope")),
            "scopeSelector": _struct("ScopeSelector", {"matchExpressions": _list(_struct(
                "ScopedResourceSelectorRequirement", {"scopeName": _named("v1.ResourceQuotaScope"),
                                                      "operator": _named("v1.ScopeSelectorOperator"),
                                                      "values": _list(_STRING)}))})}),
        "status": _struct("ResourceQuotaStatus", {"hard": _RESOURCE_LIST, "used": _RESOURCE_LIST})}),
    "LimitRange": _struct("LimitRange", {
        "metadata": _META,
        "spec": _struct("LimitRangeSpec", {"limits": _list(_struct("LimitRangeItem", {
            "type": _named("v1.LimitType"), "max": _RESOURCE_LIST, "min": _RESOURCE_LIST, "default": _RESOURCE_LIST,
            "defaultRequest": _RESOURCE_LIST, "maxLimitRequestRatio": _RESOURCE_LIST}))})}),
    "ConfigMap": _struct("ConfigMap", {"metadata": _META, "data": _map(_STRING), "immutable": _BOOL}),
    "ClusterColocationProfile": _struct("ClusterColocationProfile", {"metadata": _META}),
    "Node": _struct("Node", {"metadata": _META}),
    "Pod": _struct("Pod", {"metadata": _META}),
}
NAMESPACED = frozenset({"ResourceQuota", "LimitRange", "ConfigMap", "Pod"})


def _json_kind(value: object) -> str:
    """What the decoder calls a JSON value it cannot store (``UnmarshalTypeError.Value``)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def go_number(value: int | float) -> str:
    """A number as kubectl sends it (Go's JSON encoding of the YAML value): ``1.5``, ``99999999999``, ``0.00001``."""
    if isinstance(value, int) or value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value.is_integer():
        return str(int(value))
    text = repr(value)
    if "e" in text and 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(text), "f")
    return text


def whole(value: object) -> int | None:
    """``value`` as the integer kubectl would send (a YAML ``1.0`` is the JSON ``1``), or None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class _Decoder:
    """The first value that would not decode into its field, as the apiserver's decoder reports it."""

    def __init__(self) -> None:
        self.error: FieldError | None = None

    def _cannot(self, path: FieldPath, what: str, t: GoType, struct: str, stack: tuple[str, ...]) -> None:
        self.error = (path, f"json: cannot unmarshal {what} into Go struct field {struct}.{'.'.join(stack)} of type "
                            f"{t.name}")

    def value(self, value: object, t: GoType, path: FieldPath, text: str, struct: str,
              stack: tuple[str, ...]) -> None:
        if self.error is not None or value is None:  # JSON null leaves the zero value
            return
        shape = t.shape
        if shape == "struct":
            if not isinstance(value, dict):
                self._cannot(path, _json_kind(value), t, struct, stack)
                return
            for key, sub in value.items():
                field_type = t.fields.get(key) if isinstance(key, str) else None
                if field_type is not None:
                    self.value(sub, field_type, (*path, key), f"{text}.{key}" if text else key, t.struct,
                               (*stack, key))
        elif shape == "map":
            if not isinstance(value, dict):
                self._cannot(path, _json_kind(value), t, struct, stack)
                return
            inner = t.inner
            assert inner is not None
            for key, sub in value.items():
                self.value(sub, inner, (*path, key), f"{text}[{key}]", struct, stack)
        elif shape == "list":
            if not isinstance(value, list):
                self._cannot(path, _json_kind(value), t, struct, stack)
                return
            item = t.inner
            assert item is not None
            for i, sub in enumerate(value):
                self.value(sub, item, (*path, i), f"{text}[{i}]", struct, stack)
        elif shape == "string":
            if not isinstance(value, str):
                self._cannot(path, _json_kind(value), t, struct, stack)
        elif shape == "bool":
            if not isinstance(value, bool):
                self._cannot(path, _json_kind(value), t, struct, stack)
        elif shape == "int32":
            number = whole(value)
            if number is not None and INT32_MIN <= number <= INT32_MAX:
                return
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._cannot(path, f"number {go_number(value)}", t, struct, stack)
            else:
                self._cannot(path, _json_kind(value), t, struct, stack)
        elif shape == "quantity":
            try:
                parse_quantity(value)
            except QuantityError as exc:
                shown = value if isinstance(value, str) else go_number(value) \
                    if isinstance(value, int | float) and not isinstance(value, bool) else value
                self.error = (path, invalid(text, shown, str(exc)))


def decode_error(obj: dict[str, Any]) -> FieldError | None:
    """The error the apiserver's decoder stops at for ``obj``, or None (kinds without a schema: None)."""
    schema = SCHEMAS.get(str(obj.get("kind")))
    if schema is None:
        return None
    decoder = _Decoder()
    decoder.value(obj, schema, (), "", schema.struct, ())
    return decoder.error


# -- 2. validation ---------------------------------------------------------------------------------------------------
def _meta_errors(meta: dict[str, Any], kind: str, out: list[FieldError]) -> None:
    """``ValidateObjectMeta``: the name (a DNS label for a Namespace, else a DNS subdomain), the namespace of a
    namespaced kind, label keys and values, annotation keys and their total size."""
    name = meta.get("name") or ""
    if not name:
        out.append((("metadata", "name"), required("metadata.name", "name or generateName is required")))
    else:
        for msg in (dns1123_label(name) if kind == "Namespace" else dns1123_subdomain(name)):
            out.append((("metadata", "name"), invalid("metadata.name", name, msg)))
    namespace = meta.get("namespace") or ""
    if kind in NAMESPACED:
        if not namespace:
            out.append((("metadata", "namespace"), required("metadata.namespace", "")))
        for msg in dns1123_label(namespace) if namespace else []:
            out.append((("metadata", "namespace"), invalid("metadata.namespace", namespace, msg)))
    labels = meta.get("labels") or {}
    for key, value in labels.items():
        for msg in qualified_name(key):
            out.append((("metadata", "labels", key), invalid("metadata.labels", key, msg)))
        for msg in label_value(value or ""):
            out.append((("metadata", "labels", key), invalid("metadata.labels", value, msg)))
    annotations = meta.get("annotations") or {}
    size = 0
    for key, value in annotations.items():
        for msg in qualified_name(key.lower()):
            out.append((("metadata", "annotations", key), invalid("metadata.annotations", key, msg)))
        size += len(key.encode()) + len((value or "").encode())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        out.append((("metadata", "annotations"), too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT)))


def _priority_class_errors(obj: dict[str, Any], out: list[FieldError]) -> None:
    """``ValidatePriorityClass``: a ``system-`` name is one of the two system classes, with their value and
    ``globalDefault: false``; any other class's value is at most 1000000000; a preemptionPolicy given is one of
    the two. A class without ``value`` has 0 (``value`` is optional in scheduling.k8s.io/v1, default 0)."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    value = whole(obj.get("value")) or 0
    if name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        why = _unknown_system_class(name, value, obj.get("globalDefault") is True)
        if why:
            out.append((("metadata", "name"), forbidden(
                "metadata.name", f"priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved "
                                 f"for system use only. error: {why}")))
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        out.append((("value",), forbidden(
            "value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}")))
    policy = obj.get("preemptionPolicy")
    if policy is not None:
        if policy == "":
            out.append((("preemptionPolicy",), required("preemptionPolicy", "")))
        elif policy not in PREEMPTION_POLICIES:
            out.append((("preemptionPolicy",), not_supported("preemptionPolicy", policy, PREEMPTION_POLICIES)))


def _unknown_system_class(name: str, value: int, global_default: bool) -> str:
    """``IsKnownSystemPriorityClass``'s error, or "" for one of the system classes as the apiserver makes them."""
    if name not in SYSTEM_CLASS_VALUES:
        return f"{name} is not a known system priority class"
    if value != SYSTEM_CLASS_VALUES[name]:
        return f"value of {name} PriorityClass must be {SYSTEM_CLASS_VALUES[name]}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return ""


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _is_quota_hugepages(name: str) -> bool:
    return name.startswith(("hugepages-", "requests.hugepages-"))


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_extended(name: str) -> bool:
    """``IsExtendedResourceName``."""
    if _is_native(name) or name.startswith("requests."):
        return False
    return not qualified_name("requests." + name)


def _resource_name_errors(name: str, path: FieldPath, text: str, out: list[FieldError]) -> None:
    """``validateResourceName``: a qualified name, and a standard one without a domain."""
    errors = qualified_name(name)
    if not errors and "/" not in name and name not in _STANDARD_RESOURCES and not _is_quota_hugepages(name):
        errors = ["must be a standard resource type or fully qualified"]
    for msg in errors:
        out.append((path, invalid(text, name, msg)))


def _quota_resource_errors(name: str, value: object, path: FieldPath, text: str, out: list[FieldError]) -> None:
    """``ValidateResourceQuotaResourceName`` and ``ValidateResourceQuantityValue`` of one ``hard``/``used`` entry."""
    _resource_name_errors(name, path, text, out)
    if "/" not in name and name not in _STANDARD_QUOTA_RESOURCES and not _is_quota_hugepages(name):
        out.append((path, invalid(text, name, _INVALID_QUOTA_RESOURCE)))
    q = parse_quantity(value)
    if q < 0:
        out.append((path, invalid(text, canonical(value), _NEGATIVE)))
    if (name in _INTEGER_RESOURCES or _is_extended(name)) and milli_value(q) % 1000 != 0:
        out.append((path, invalid(text, canonical(value), _NOT_INTEGER)))


def _scope_valid_for(scope: str, resource: str) -> bool:
    """``IsResourceQuotaScopeValidForResource``."""
    if scope in ("Terminating", "NotTerminating", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity"):
        return resource in _POD_COUNT or resource in _POD_COMPUTE
    if scope == "BestEffort":
        return resource in _POD_COUNT
    if scope == "VolumeAttributesClass":
        return resource in _PVC_COUNT or resource in _PVC_STORAGE
    return True


def _go_scopes(spec: dict[str, Any]) -> list[str]:
    return list(spec.get("scopes") or [])


def _go_selector(selector: dict[str, Any]) -> dict[str, Any]:
    """The internal ScopeSelector as ``json.Marshal`` prints it in a field error (its Go field names)."""
    return {"MatchExpressions": [{"ScopeName": e.get("scopeName") or "", "Operator": e.get("operator") or "",
                                  "Values": e.get("values")}
                                 for e in selector.get("matchExpressions") or [] if isinstance(e, dict)]}


def _resource_quota_errors(obj: dict[str, Any], out: list[FieldError]) -> None:
    """``ValidateResourceQuota``: spec (hard, scopes, scopeSelector) and status (hard, used)."""
    spec = obj.get("spec") or {}
    hard = spec.get("hard") or {}
    for name, value in hard.items():
        _quota_resource_errors(name, value, ("spec", "hard", name), f"spec.hard[{name}]", out)
    limited = sorted(hard)
    scopes = _go_scopes(spec)
    for scope in scopes:
        if scope not in QUOTA_SCOPES:
            out.append((("spec", "scopes"), invalid("spec.scopes", scopes, "unsupported scope")))
        for resource in limited:
            if (resource in _STANDARD_QUOTA_RESOURCES or _is_quota_hugepages(resource)) and \
                    not _scope_valid_for(scope, resource):
                out.append((("spec", "scopes"),
                            invalid("spec.scopes", scopes, "unsupported scope applied to resource")))
    _conflicting(set(scopes), ("spec", "scopes"), "spec.scopes", scopes, out)
    selector = spec.get("scopeSelector")
    if selector is not None:
        _scope_selector_errors(spec, selector, limited, out)
    status = obj.get("status") or {}
    for part in ("hard", "used"):
        for name, value in (status.get(part) or {}).items():
            _quota_resource_errors(name, value, ("status", part, name), f"status.{part}[{name}]", out)


def _conflicting(scopes: set[str], path: FieldPath, text: str, value: object, out: list[FieldError]) -> None:
    for pair in (("BestEffort", "NotBestEffort"), ("Terminating", "NotTerminating")):
        if pair[0] in scopes and pair[1] in scopes:
            out.append((path, invalid(text, value, "conflicting scopes")))


def _scope_selector_errors(spec: dict[str, Any], selector: dict[str, Any], limited: list[str],
                           out: list[FieldError]) -> None:
    """``validateScopedResourceSelectorRequirement``."""
    base = "spec.scopeSelector.matchExpressions"
    seen: set[str] = set()
    for i, req in enumerate(selector.get("matchExpressions") or []):
        if not isinstance(req, dict):
            continue
        at: FieldPath = ("spec", "scopeSelector", "matchExpressions", i)
        scope, operator, values = req.get("scopeName") or "", req.get("operator") or "", req.get("values") or []
        if scope not in QUOTA_SCOPES:
            out.append(((*at, "scopeName"), invalid(f"{base}.scopeName", scope, "unsupported scope")))
        for resource in limited:
            if (resource in _STANDARD_QUOTA_RESOURCES or _is_quota_hugepages(resource)) and \
                    not _scope_valid_for(scope, resource):
                out.append((at, invalid(base, _go_selector(selector), "unsupported scope applied to resource")))
        if scope in _EXISTS_ONLY_SCOPES and operator != "Exists":
            out.append(((*at, "operator"), invalid(
                f"{base}.operator", operator, "must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, "
                "ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or "
                "ResourceQuotaScopeCrossNamespacePodAffinity")))
        if operator in ("In", "NotIn"):
            if not values:
                out.append(((*at, "values"), required(
                    f"{base}.values", "must be at least one value when `operator` is 'In' or 'NotIn' for scope "
                                      "selector")))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                out.append(((*at, "values"), invalid(
                    f"{base}.values", values, "must be no value when `operator` is 'Exist' or 'DoesNotExist' for "
                                              "scope selector")))
        else:
            out.append(((*at, "operator"), invalid(f"{base}.operator", operator, "not a valid selector operator")))
        seen.add(scope)
    _conflicting(seen, ("spec", "scopeSelector", "matchExpressions"), base, _go_scopes(spec), out)


def _limit_range_errors(obj: dict[str, Any], out: list[FieldError]) -> None:
    """``ValidateLimitRange``: each item's type (one per type), its resource names, and its min, max, defaults
    and ratios against each other."""
    types: set[str] = set()
    for i, item in enumerate((obj.get("spec") or {}).get("limits") or []):
        if not isinstance(item, dict):
            continue
        at: FieldPath = ("spec", "limits", i)
        base = f"spec.limits[{i}]"
        kind = item.get("type") or ""
        type_errors = qualified_name(kind)
        if not type_errors and "/" not in kind and kind not in LIMIT_TYPES:
            type_errors = ["must be a standard limit type or fully qualified"]
        for msg in type_errors:
            out.append(((*at, "type"), invalid(f"{base}.type", kind, msg)))
        if kind in types:
            out.append(((*at, "type"), duplicate(f"{base}.type", kind)))
        types.add(kind)
        parts: dict[str, dict[str, Decimal]] = {}
        raw: dict[str, dict[str, object]] = {}
        names = ["max", "min"]
        if kind == "Pod":
            for part in ("default", "defaultRequest"):
                if item.get(part):
                    out.append(((*at, part), forbidden(f"{base}.{part}", "may not be specified when `type` is 'Pod'")))
        else:
            names += ["default", "defaultRequest"]
        if kind == "PersistentVolumeClaim" and "storage" not in (item.get("min") or {}) \
                and "storage" not in (item.get("max") or {}):
            out.append(((*at, "limits"), required(
                f"{base}.limits", "either minimum or maximum storage value is required, but neither was provided")))
        names.append("maxLimitRequestRatio")
        keys: list[str] = []
        for part in names:
            values = item.get(part) or {}
            raw[part] = values
            parts[part] = {}
            for name, value in values.items():
                _limit_resource_name_errors(kind, name, (*at, part, name), f"{base}.{part}[{name}]", out)
                parts[part][name] = parse_quantity(value)
                if name not in keys:
                    keys.append(name)
        for name in keys:
            _limit_values_errors(name, parts, raw, at, base, out)


def _limit_resource_name_errors(kind: str, name: str, path: FieldPath, text: str, out: list[FieldError]) -> None:
    """``validateLimitRangeResourceName``: a Pod or Container item names container resources."""
    _resource_name_errors(name, path, text, out)
    if kind not in ("Pod", "Container"):
        return
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not _is_hugepages(name):
            out.append((path, invalid(text, name, "must be a standard resource for containers")))
    elif not _is_native(name) and not _is_extended(name):
        out.append((path, invalid(text, name, "doesn't follow extended resource name standard")))


def _limit_values_errors(name: str, parts: dict[str, dict[str, Decimal]], raw: dict[str, dict[str, object]],
                         at: FieldPath, base: str, out: list[FieldError]) -> None:
    def q(part: str) -> Decimal | None:
        return parts.get(part, {}).get(name)

    def shown(part: str) -> str:
        return canonical(raw[part][name])

    def add(part: str, value_of: str, detail: str) -> None:
        out.append(((*at, part, name), invalid(f"{base}.{part}[{name}]", shown(value_of), detail)))

    low, high, default, request, ratio = q("min"), q("max"), q("default"), q("defaultRequest"), \
        q("maxLimitRequestRatio")
    if low is not None and high is not None and low > high:
        add("min", "min", f"min value {shown('min')} is greater than max value {shown('max')}")
    if request is not None and low is not None and low > request:
        add("defaultRequest", "defaultRequest",
            f"min value {shown('min')} is greater than default request value {shown('defaultRequest')}")
    if request is not None and high is not None and request > high:
        add("defaultRequest", "defaultRequest",
            f"default request value {shown('defaultRequest')} is greater than max value {shown('max')}")
    if request is not None and default is not None and request > default:
        add("defaultRequest", "defaultRequest", f"default request value {shown('defaultRequest')} is greater than "
                                                f"default limit value {shown('default')}")
    if default is not None and low is not None and low > default:
        add("default", "min", f"min value {shown('min')} is greater than default value {shown('default')}")
    if default is not None and high is not None and default > high:
        add("default", "max", f"default value {shown('default')} is greater than max value {shown('max')}")
    if ratio is not None and ratio < 1:
        add("maxLimitRequestRatio", "maxLimitRequestRatio", f"ratio {shown('maxLimitRequestRatio')} is less than 1")
    if ratio is not None and low is not None and high is not None:
        limit = _max_over_min(ratio, low, high)
        if limit is not None and limit[0] > limit[1]:
            add("maxLimitRequestRatio", "maxLimitRequestRatio",
                f"ratio {shown('maxLimitRequestRatio')} is greater than max/min = {limit[1]:f}")
    if not (_is_native(name) and not _is_hugepages(name)) and default is not None and request is not None \
            and default != request:
        add("defaultRequest", "defaultRequest", f"default value {shown('default')} must equal to defaultRequest "
                                                f"value {shown('defaultRequest')} in {name}")


_MAX_MILLI_VALUE = (2**63 - 1) // 1000  # resource.MaxMilliValue


def _max_over_min(ratio: Decimal, low: Decimal, high: Decimal) -> tuple[float, float] | None:
    """(the ratio, max/min) as ``ValidateLimitRange`` compares them (in milli-units when they fit), or None when
    min is 0 (Go's division gives +Inf, which no ratio exceeds)."""
    ratio_value, low_value, high_value = float(int_value(ratio)), int_value(low), int_value(high)
    if int_value(ratio) < _MAX_MILLI_VALUE and low_value < _MAX_MILLI_VALUE and high_value < _MAX_MILLI_VALUE:
        ratio_value = milli_value(ratio) / 1000
        low_value, high_value = milli_value(low), milli_value(high)
    if low_value == 0:
        return None
    return ratio_value, high_value / low_value


def _config_map_errors(obj: dict[str, Any], out: list[FieldError]) -> None:
    """``ValidateConfigMap``: data keys, and the size of all values."""
    size = 0
    for key, value in (obj.get("data") or {}).items():
        for msg in _config_key(key):
            out.append((("data", key), invalid(f"data[{key}]", key, msg)))
        size += len((value or "").encode())
    if size > MAX_CONFIG_MAP_SIZE:
        out.append(((), too_long("", MAX_CONFIG_MAP_SIZE)))


def _config_key(key: str) -> list[str]:
    """``IsConfigMapKey``."""
    errs = ["must be no more than 253 characters"] if len(key) > 253 else []
    if not key or any(not (c.isascii() and (c.isalnum() or c in "-._")) for c in key):
        errs.append(regex_error(_CONFIG_KEY_MSG, _CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if key == ".":
        errs.append("must not be '.'")
    elif key == "..":
        errs.append("must not be '..'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def object_errors(obj: dict[str, Any]) -> list[FieldError]:
    """Every error the apiserver would refuse ``obj`` with (a kind the state holds, with its metadata defaulted
    as the source stores it), in its words; empty when it would take it. The decoder's error alone when the
    object does not decode."""
    kind = str(obj.get("kind"))
    decoded = decode_error(obj)
    if decoded is not None:
        return [decoded]
    if kind not in SCHEMAS:
        return []
    out: list[FieldError] = []
    meta = obj.get("metadata") or {}
    _meta_errors(meta, kind, out)
    try:
        if kind == "PriorityClass":
            _priority_class_errors(obj, out)
        elif kind == "ResourceQuota":
            _resource_quota_errors(obj, out)
        elif kind == "LimitRange":
            _limit_range_errors(obj, out)
        elif kind == "ConfigMap":
            _config_map_errors(obj, out)
    except (QuantityError, decimal.DecimalException) as exc:  # decoded above: not reached; said, never raised
        out.append(((), str(exc)))
    return out


def already_exists(resource: str, name: str) -> str:
    """The apiserver's answer to a second object of one name (``AlreadyExists``):
    ``priorityclasses.scheduling.k8s.io "koord-batch" already exists``."""
    return f'{resource} "{name}" already exists'


def second_default(first: str) -> str:
    """The Priority admission plugin's answer to a second ``globalDefault`` PriorityClass
    (plugin/pkg/admission/priority/admission.go)."""
    return f"PriorityClass {first} is already marked as default. Only one default can exist"
