"""A strict CEL type checker for admission policies, with the Kubernetes CEL environment declared as the apiserver
declares it, for the tests.

cel-python (the evaluator of ``tests/admission_policy.py``) does not type-check, so a policy a real kube-apiserver
refuses at write time can pass every evaluation test: ``quantity(x).sign()`` did (``sign`` is a global function,
``sign(quantity(x))``; the apiserver said ``found no matching overload for 'sign' applied to
'kubernetes.Quantity.()'``). This module compiles every expression of a policy with cel-expr-python (Google's CEL
C++ runtime and its type checker) in an environment that mirrors what the apiserver compiles a *new* policy
against, and lists every problem: ``check_policy(policy) -> list[str]``. The messages are cel-cpp's, not
cel-go's: a member call of a global reads ``undeclared reference to 'sign'``.

Which apiserver. The policies must install on Kubernetes 1.30 to 1.36, so the environment is the one a 1.30
apiserver checks a created or changed policy in: its ``NewExpressions`` environment, i.e. the base environment
(k8s.io/apiserver/pkg/cel/environment/base.go) at the compatibility version 1.29 that a 1.30 apiserver uses
(``DefaultCompatibilityVersion`` is one minor below the binary: every option with ``IntroducedVersion`` <= 1.29,
no more). That is:

- 1.0: ``HomogeneousAggregateLiterals``, the URLs, Regex and Lists libraries (library/urls.go, regex.go, lists.go);
- 1.27: the Authz library (library/authz.go), without the selectors (1.31);
- 1.28: ``CrossTypeNumericComparisons``, ``OptionalTypes`` (cel-go's optional library, version 1: cel-go v0.17's
  latest), the Quantity library (library/quantity.go);
- 1.29: the AST validators (duration, timestamp and regex literals, homogeneous aggregate literals), cel-go's
  strings extension version 2 (github.com/google/cel-go/ext/strings.go) and its sets extension (ext/sets.go).

Not declared, so a call is refused: IP and CIDR (library/ip.go, cidr.go: introduced 1.30, so usable in new
expressions from 1.31), Format (library/format.go, 1.31), the authz selectors (1.31), two-variable comprehensions
(1.32), Semver (library/semverlib.go, 1.33), cel-go's lists extension (1.34), JSONPatch (library/jsonpatch.go:
MutatingAdmissionPolicy only).

The variables, as k8s.io/apiserver/pkg/admission/plugin/cel/compile.go declares them: ``object``, ``oldObject``
and ``params`` (only with a ``paramKind``) are ``dyn``; ``request`` is ``kubernetes.AdmissionRequest`` and
``namespaceObject`` ``kubernetes.Namespace``, typed field by field (``request.typo`` does not compile);
``authorizer`` and ``authorizer.requestResource``; ``variables`` (plugin/cel/composition.go) has one field per
variable, of the type its expression compiled to (primitives, and lists and maps of them; anything else ``dyn``, as
``convertCelTypeToDeclType`` does), in order: a variable sees the ones before it, ``variables.typo`` does not
compile. Which expression sees what follows pkg/apis/admissionregistration/validation/validation.go:
``matchConditions`` see no ``variables``; a ``messageExpression`` sees no ``authorizer``; ``params`` only with a
``paramKind``. The result types are checked exactly, as compile.go does: a validation or match condition must be
``bool`` (not ``dyn``), a ``messageExpression`` ``string``, an audit annotation's ``valueExpression`` ``string``
or ``null_type``.

What it cannot enforce, and why:

- Homogeneous aggregate literals (cel-go's ``ValidateHomogeneousAggregateLiterals``: ``[1, 'a']``, ``[x, 'a']``
  with ``x`` dyn, ``{'a': 1, 'b': 'c'}``): cel-expr-python has no such option (it types ``[1, 'a']`` as
  ``list(dyn)``), so this module does it itself on the checked AST cel-expr-python serializes (each element's
  type against the first's, literals inside ``format`` calls exempt, as upstream). Enforced, then, but by this
  module's code, not the checker's.
- Duration and timestamp literals (``duration('1x')``): likewise checked here, by Go's grammar
  (``time.ParseDuration``, RFC 3339).
- Regex literals (``'a'.matches('[')``): NOT checked. The apiserver compiles them with Go's RE2, and Python's
  ``re`` accepts and refuses other patterns than RE2 does, so a check here would be wrong both ways.
- ``format`` calls: cel-go's strings extension also checks a literal format string against its arguments
  (``'%d'.format(['a'])``, its stringFormatValidator); not replicated here.
- The standard library is cel-cpp's, not cel-go's: the same CEL specification, but a function cel-go v0.17 lacks
  and cel-cpp has would pass here. The ordering operators are re-declared with cel-go's overloads, cross-type
  numeric ones included (cel-cpp has no such option).
- ``request.userInfo.extra`` is ``map(string, list(dyn))`` here, ``map(string, list(string))`` upstream: the
  typed variables are protobuf messages (cel-expr-python takes struct types only from a protobuf descriptor pool),
  and a map value cannot be a repeated field (``google.protobuf.ListValue`` is the nearest).
- ``has(variables.x)``: cel-cpp types it as ``variables.x`` itself (a quirk with qualified names), so it is
  refused here with a message saying so; upstream accepts it (it is always true).
- Cost: nothing to check at write time (validation.go estimates no cost for a policy); the runtime budget is
  the evaluation's business (an evaluation error, then ``failurePolicy``).
- MutatingAdmissionPolicy (``admissionregistration.k8s.io/v1`` from 1.36, so never on a 1.30 apiserver): its
  expressions are checked in the 1.30 environment above plus what a 1.36 apiserver offers and the project's
  policies use: cel-go's lists extension (``lists.range``, ``flatten``), the ``JSONPatch`` type
  (``op``, ``path``, ``from`` strings, a ``value`` of any type) and ``jsonpatch.escapeKey``. A JSONPatch mutation
  must evaluate to ``list(JSONPatch)``. An ApplyConfiguration mutation is refused here: its ``Object{...}`` types
  come from the schema of the object at run time and are not declared. The rest of 1.31..1.36 (two-variable
  comprehensions, Format, IP/CIDR, Semver, the newer lists functions) stays undeclared: refused, as a policy
  should not need it.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional
from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2, timestamp_pb2

T = cel.Type

# -- the function declarations ---------------------------------------------------------------------------------------
QUANTITY = "k8s.io/apiserver/pkg/cel/library/quantity.go"
LISTS = "k8s.io/apiserver/pkg/cel/library/lists.go"
REGEX = "k8s.io/apiserver/pkg/cel/library/regex.go"
URLS = "k8s.io/apiserver/pkg/cel/library/urls.go"
AUTHZ = "k8s.io/apiserver/pkg/cel/library/authz.go"
STRINGS = "github.com/google/cel-go/ext/strings.go (StringsVersion(2))"
SETS = "github.com/google/cel-go/ext/sets.go"
STDLIB = "github.com/google/cel-go/common/stdlib/standard.go (CrossTypeNumericComparisons)"


@dataclass(frozen=True)
class Decl:
    """One overload: ``member`` ones are called ``args[0].function(args[1:])``, the others ``function(args)``.
    Types are written ``int``, ``list(string)``, ``map(string, list(string))``, ``kubernetes.Quantity``; ``~A`` is
    a type parameter."""

    function: str
    id: str
    member: bool
    args: tuple[str, ...]
    result: str
    upstream: str


def _member(function: str, id: str, args: Sequence[str], result: str, upstream: str) -> Decl:
    return Decl(function, id, True, tuple(args), result, upstream)


def _global(function: str, id: str, args: Sequence[str], result: str, upstream: str) -> Decl:
    return Decl(function, id, False, tuple(args), result, upstream)


Q = "kubernetes.Quantity"
URL = "kubernetes.URL"
AUTHORIZER, PATH_CHECK, GROUP_CHECK = ("kubernetes.authorization.Authorizer", "kubernetes.authorization.PathCheck",
                                       "kubernetes.authorization.GroupCheck")
RESOURCE_CHECK, DECISION = "kubernetes.authorization.ResourceCheck", "kubernetes.authorization.Decision"
_COMPARABLE = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")  # lists.go
_SUMMABLE = ("int", "uint", "double", "duration")  # lists.go

_ORDERING: list[Decl] = []
for _op, _prefix in (("_<_", "less"), ("_<=_", "less_equals"), ("_>_", "greater"), ("_>=_", "greater_equals")):
    _ids = {"int": "int64", "uint": "uint64", "double": "double"}
    for _t in ("bool", "int", "uint", "double", "string", "bytes", "timestamp", "duration"):
        _ORDERING.append(_global(_op, f"{_prefix}_{_ids.get(_t, _t)}", (_t, _t), "bool", STDLIB))
    for _a in ("int", "uint", "double"):
        for _b in ("int", "uint", "double"):
            if _a != _b:
                _ORDERING.append(_global(_op, f"{_prefix}_{_ids[_a]}_{_ids[_b]}", (_a, _b), "bool", STDLIB))

DECLARATIONS: tuple[Decl, ...] = (
    # Quantity (base environment from 1.28). sign and the constructors are globals, the rest members.
    _global("quantity", "string_to_quantity", ["string"], Q, QUANTITY),
    _global("isQuantity", "is_quantity_string", ["string"], "bool", QUANTITY),
    _global("sign", "quantity_sign", [Q], "int", QUANTITY),
    _member("isGreaterThan", "quantity_is_greater_than", [Q, Q], "bool", QUANTITY),
    _member("isLessThan", "quantity_is_less_than", [Q, Q], "bool", QUANTITY),
    _member("compareTo", "quantity_compare_to", [Q, Q], "int", QUANTITY),
    _member("asApproximateFloat", "quantity_get_float", [Q], "double", QUANTITY),
    _member("asInteger", "quantity_get_int", [Q], "int", QUANTITY),
    _member("isInteger", "quantity_is_integer", [Q], "bool", QUANTITY),
    _member("add", "quantity_add", [Q, Q], Q, QUANTITY),
    _member("add", "quantity_add_int", [Q, "int"], Q, QUANTITY),
    _member("sub", "quantity_sub", [Q, Q], Q, QUANTITY),
    _member("sub", "quantity_sub_int", [Q, "int"], Q, QUANTITY),
    # Lists (base environment from 1.0).
    *(_member("isSorted", f"list_{t}_is_sorted_bool", [f"list({t})"], "bool", LISTS) for t in _COMPARABLE),
    *(_member("sum", f"list_{t}_sum_{t}", [f"list({t})"], t, LISTS) for t in _SUMMABLE),
    *(_member("max", f"list_{t}_max_{t}", [f"list({t})"], t, LISTS) for t in _COMPARABLE),
    *(_member("min", f"list_{t}_min_{t}", [f"list({t})"], t, LISTS) for t in _COMPARABLE),
    _member("indexOf", "list_a_index_of_int", ["list(~A)", "~A"], "int", LISTS),
    _member("lastIndexOf", "list_a_last_index_of_int", ["list(~A)", "~A"], "int", LISTS),
    # Regex (1.0).
    _member("find", "string_find_string", ["string", "string"], "string", REGEX),
    _member("findAll", "string_find_all_string", ["string", "string"], "list(string)", REGEX),
    _member("findAll", "string_find_all_string_int", ["string", "string", "int"], "list(string)", REGEX),
    # URLs (1.0).
    _global("url", "string_to_url", ["string"], URL, URLS),
    _member("getScheme", "url_get_scheme", [URL], "string", URLS),
    _member("getHost", "url_get_host", [URL], "string", URLS),
    _member("getHostname", "url_get_hostname", [URL], "string", URLS),
    _member("getPort", "url_get_port", [URL], "string", URLS),
    _member("getEscapedPath", "url_get_escaped_path", [URL], "string", URLS),
    _member("getQuery", "url_get_query", [URL], "map(string, list(string))", URLS),
    _global("isURL", "is_url_string", ["string"], "bool", URLS),
    # Authz (1.27), without the selectors (fieldSelector, labelSelector: 1.31).
    _member("path", "authorizer_path", [AUTHORIZER, "string"], PATH_CHECK, AUTHZ),
    _member("group", "authorizer_group", [AUTHORIZER, "string"], GROUP_CHECK, AUTHZ),
    _member("serviceAccount", "authorizer_serviceaccount", [AUTHORIZER, "string", "string"], AUTHORIZER, AUTHZ),
    _member("resource", "groupcheck_resource", [GROUP_CHECK, "string"], RESOURCE_CHECK, AUTHZ),
    _member("subresource", "resourcecheck_subresource", [RESOURCE_CHECK, "string"], RESOURCE_CHECK, AUTHZ),
    _member("namespace", "resourcecheck_namespace", [RESOURCE_CHECK, "string"], RESOURCE_CHECK, AUTHZ),
    _member("name", "resourcecheck_name", [RESOURCE_CHECK, "string"], RESOURCE_CHECK, AUTHZ),
    _member("check", "pathcheck_check", [PATH_CHECK, "string"], DECISION, AUTHZ),
    _member("check", "resourcecheck_check", [RESOURCE_CHECK, "string"], DECISION, AUTHZ),
    _member("errored", "decision_errored", [DECISION], "bool", AUTHZ),
    _member("error", "decision_error", [DECISION], "string", AUTHZ),
    _member("allowed", "decision_allowed", [DECISION], "bool", AUTHZ),
    _member("reason", "decision_reason", [DECISION], "string", AUTHZ),
    # cel-go strings extension, version 2 (1.29).
    _member("charAt", "string_char_at_int", ["string", "int"], "string", STRINGS),
    _member("indexOf", "string_index_of_string", ["string", "string"], "int", STRINGS),
    _member("indexOf", "string_index_of_string_int", ["string", "string", "int"], "int", STRINGS),
    _member("lastIndexOf", "string_last_index_of_string", ["string", "string"], "int", STRINGS),
    _member("lastIndexOf", "string_last_index_of_string_int", ["string", "string", "int"], "int", STRINGS),
    _member("lowerAscii", "string_lower_ascii", ["string"], "string", STRINGS),
    _member("replace", "string_replace_string_string", ["string", "string", "string"], "string", STRINGS),
    _member("replace", "string_replace_string_string_int", ["string", "string", "string", "int"], "string",
            STRINGS),
    _member("split", "string_split_string", ["string", "string"], "list(string)", STRINGS),
    _member("split", "string_split_string_int", ["string", "string", "int"], "list(string)", STRINGS),
    _member("substring", "string_substring_int", ["string", "int"], "string", STRINGS),
    _member("substring", "string_substring_int_int", ["string", "int", "int"], "string", STRINGS),
    _member("trim", "string_trim", ["string"], "string", STRINGS),
    _member("upperAscii", "string_upper_ascii", ["string"], "string", STRINGS),
    _member("format", "string_format", ["string", "list(dyn)"], "string", STRINGS),
    _global("strings.quote", "strings_quote", ["string"], "string", STRINGS),
    _member("join", "list_join", ["list(string)"], "string", STRINGS),
    _member("join", "list_join_string", ["list(string)", "string"], "string", STRINGS),
    # cel-go sets extension (1.29).
    _global("sets.contains", "list_sets_contains_list", ["list(~T)", "list(~T)"], "bool", SETS),
    _global("sets.equivalent", "list_sets_equivalent_list", ["list(~T)", "list(~T)"], "bool", SETS),
    _global("sets.intersects", "list_sets_intersects_list", ["list(~T)", "list(~T)"], "bool", SETS),
    # cel-go's ordering operators with CrossTypeNumericComparisons (1.28): they replace cel-cpp's own.
    *_ORDERING,
)
# What a 1.36 apiserver adds for a MutatingAdmissionPolicy, as far as this project's policies use it (a v1.36.2
# apiserver compiled each): cel-go's lists extension (ext/lists.go, ``lists.range`` and ``flatten``; in the base
# environment from 1.34) and the JSONPatch type (library/jsonpatch.go, ``JSONPatch`` below) with
# ``jsonpatch.escapeKey``.
LISTS_EXT = "github.com/google/cel-go/ext/lists.go"
JSONPATCH = "k8s.io/apiserver/pkg/cel/library/jsonpatch.go"
MUTATING_DECLARATIONS: tuple[Decl, ...] = (
    _global("lists.range", "lists_range", ["int"], "list(int)", LISTS_EXT),
    _member("flatten", "list_flatten", ["list(list(~T))"], "list(~T)", LISTS_EXT),
    _global("jsonpatch.escapeKey", "string_jsonpatch_escapekey_string", ["string"], "string", JSONPATCH),
)
# cel-go's optional library (cel.OptionalTypes, 1.28), at version 1: cel-go v0.17, which a 1.30 apiserver is built
# with, has optional.of/ofNonZeroValue/none, hasValue, value, or, orValue, optMap, optFlatMap (not first/last).
OPTIONAL_VERSION = 1


def _type_desc(spec: str) -> dict[str, Any]:
    """``list(map(string, ~A))`` -> the env config's type description."""
    spec = spec.strip()
    if spec.startswith("~"):
        return {"type_name": spec[1:], "is_type_param": True}
    m = re.fullmatch(r"([\w.]+)\((.*)\)", spec)
    if not m:
        return {"type_name": spec}
    params, depth, start = [], 0, 0
    inner = m.group(2)
    for i, ch in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            params.append(inner[start:i])
            start = i + 1
    params.append(inner[start:])
    return {"type_name": m.group(1), "params": [_type_desc(p) for p in params]}


def env_config_yaml(declarations: Sequence[Decl] = DECLARATIONS) -> str:
    """The declarations as a cel-expr-python environment config (the only way it takes type parameters)."""
    functions: dict[str, list[dict[str, Any]]] = {}
    for d in declarations:
        overload: dict[str, Any] = {"id": d.id}
        args = [_type_desc(a) for a in d.args]
        if d.member:
            overload["target"], args = args[0], args[1:]
        if args:
            overload["args"] = args
        overload["return"] = _type_desc(d.result)
        functions.setdefault(d.function, []).append(overload)
    ordering = sorted({d.function for d in declarations if d.upstream == STDLIB})
    config = {
        "stdlib": {"exclude_functions": [{"name": f} for f in ordering]},
        "functions": [{"name": f, "overloads": o} for f, o in functions.items()],
    }
    return yaml.safe_dump(config, sort_keys=False)


# -- the typed variables: request and namespaceObject, as compile.go's BuildRequestType/BuildNamespaceType ---------
_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _F.TYPE_STRING, "bool": _F.TYPE_BOOL, "int": _F.TYPE_INT64}
_WELL_KNOWN = {"timestamp": ".google.protobuf.Timestamp", "dyn": ".google.protobuf.Value",
               "list(dyn)": ".google.protobuf.ListValue"}
# message -> [(field, type)]; "list(X)" is a repeated field, "map(string, X)" a map.
_MESSAGES: dict[str, list[tuple[str, str]]] = {
    "GroupVersionKind": [("group", "string"), ("version", "string"), ("kind", "string")],
    "GroupVersionResource": [("group", "string"), ("version", "string"), ("resource", "string")],
    # extra: map(string, list(string)) upstream; a map value cannot be repeated, so list(dyn) (ListValue) here.
    "UserInfo": [("username", "string"), ("uid", "string"), ("groups", "list(string)"),
                 ("extra", "map(string, list(dyn))")],
    "AdmissionRequest": [("kind", "GroupVersionKind"), ("resource", "GroupVersionResource"),
                         ("subResource", "string"), ("requestKind", "GroupVersionKind"),
                         ("requestResource", "GroupVersionResource"), ("requestSubResource", "string"),
                         ("name", "string"), ("namespace", "string"), ("operation", "string"),
                         ("userInfo", "UserInfo"), ("dryRun", "bool"), ("options", "dyn")],
    "NamespaceSpec": [("finalizers", "list(string)")],
    "NamespaceCondition": [("status", "string"), ("type", "string"), ("lastTransitionTime", "timestamp"),
                           ("message", "string"), ("reason", "string")],
    "NamespaceStatus": [("conditions", "list(NamespaceCondition)"), ("phase", "string")],
    "NamespaceMetadata": [("name", "string"), ("generateName", "string"), ("namespace", "string"),
                          ("labels", "map(string, string)"), ("annotations", "map(string, string)"),
                          ("UID", "string"), ("creationTimestamp", "timestamp"),
                          ("deletionGracePeriodSeconds", "int"), ("deletionTimestamp", "timestamp"),
                          ("generation", "int"), ("resourceVersion", "string"), ("finalizers", "list(string)")],
    "Namespace": [("metadata", "NamespaceMetadata"), ("spec", "NamespaceSpec"), ("status", "NamespaceStatus")],
}


def _set_field_type(field: Any, spec: str) -> None:
    if spec in _SCALARS:
        field.type = _SCALARS[spec]
    elif spec in _WELL_KNOWN:
        field.type, field.type_name = _F.TYPE_MESSAGE, _WELL_KNOWN[spec]
    else:
        field.type, field.type_name = _F.TYPE_MESSAGE, ".kubernetes." + spec


@functools.cache
def _descriptor_pool(mutating: bool = False) -> Any:
    """The ``kubernetes.*`` messages (cel-expr-python takes struct types only from a protobuf descriptor pool);
    ``mutating``: also ``JSONPatch`` (op, path, from, and a value of any type)."""
    fd = descriptor_pb2.FileDescriptorProto(name="kubernetes/admission_cel.proto", package="kubernetes",
                                            syntax="proto3")
    fd.dependency.extend(["google/protobuf/struct.proto", "google/protobuf/timestamp.proto"])
    for name, fields in _MESSAGES.items():
        message = fd.message_type.add(name=name)
        for number, (field_name, spec) in enumerate(fields, start=1):
            field = message.field.add(name=field_name, number=number, label=_F.LABEL_OPTIONAL)
            m = re.fullmatch(r"map\(string, (.+)\)", spec)
            if m:
                entry = message.nested_type.add(name=field_name[0].upper() + field_name[1:] + "Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
                _set_field_type(entry.field.add(name="value", number=2, label=_F.LABEL_OPTIONAL), m.group(1))
                field.label, field.type = _F.LABEL_REPEATED, _F.TYPE_MESSAGE
                field.type_name = f".kubernetes.{name}.{entry.name}"
            elif spec.startswith("list(") and spec != "list(dyn)":
                field.label = _F.LABEL_REPEATED
                _set_field_type(field, spec[5:-1])
            else:
                _set_field_type(field, spec)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fd)
    if mutating:
        patch = descriptor_pb2.FileDescriptorProto(name="kubernetes/jsonpatch_cel.proto", syntax="proto3")
        patch.dependency.append("google/protobuf/struct.proto")
        message = patch.message_type.add(name="JSONPatch")
        for number, name in enumerate(("op", "path", "from", "value"), start=1):
            _set_field_type(message.field.add(name=name, number=number, label=_F.LABEL_OPTIONAL),
                            "dyn" if name == "value" else "string")
        pool.Add(patch)
    return pool


@functools.cache
def _env_config(mutating: bool = False) -> Any:
    return cel.NewEnvConfigFromYaml(env_config_yaml(DECLARATIONS + (MUTATING_DECLARATIONS if mutating else ())))


@dataclass(frozen=True)
class Scope:
    """What one expression sees (validation.go): params with a paramKind, authorizer except in messageExpression,
    variables (name -> compiled type) where the policy has any, except in matchConditions."""

    params: bool = False
    authorizer: bool = True
    variables: tuple[tuple[str, str], ...] | None = None
    mutating: bool = False  # a MutatingAdmissionPolicy's: the 1.36 additions above


_PRIMITIVES = {"int": T.INT, "uint": T.UINT, "double": T.DOUBLE, "bool": T.BOOL, "string": T.STRING,
               "bytes": T.BYTES, "null_type": T.NULL, "timestamp": T.TIMESTAMP, "duration": T.DURATION,
               "dyn": T.DYN}


def _cel_type(spec: str) -> Any:
    """A variable's type (only primitives, lists and maps of them, and dyn: see ``declared_type``)."""
    if spec in _PRIMITIVES:
        return _PRIMITIVES[spec]
    desc = _type_desc(spec)
    params = [_spec_of(p) for p in desc.get("params", [])]
    if desc["type_name"] == "list":
        return T.List(_cel_type(params[0]))
    if desc["type_name"] == "map":
        return T.Map(_cel_type(params[0]), _cel_type(params[1]))
    raise ValueError(f"not a variable type: {spec}")


def _spec_of(desc: dict[str, Any]) -> str:
    params = desc.get("params")
    return str(desc["type_name"]) + (f"({', '.join(_spec_of(p) for p in params)})" if params else "")


@functools.lru_cache(maxsize=256)
def _env(scope: Scope) -> Any:
    variables: dict[str, Any] = {"object": T.DYN, "oldObject": T.DYN,
                                 "request": T("kubernetes.AdmissionRequest"),
                                 "namespaceObject": T("kubernetes.Namespace")}
    if scope.params:
        variables["params"] = T.DYN
    if scope.authorizer:
        variables["authorizer"] = T.AbstractType(AUTHORIZER)
        variables["authorizer.requestResource"] = T.AbstractType(RESOURCE_CHECK)
    # ``variables.NAME`` as qualified names: the exact compiled types (a protobuf message could not hold them).
    for name, spec in scope.variables or ():
        variables["variables." + name] = _cel_type(spec)
    return cel.NewEnv(descriptor_pool=_descriptor_pool(scope.mutating), config=_env_config(scope.mutating),
                      variables=variables,
                      extensions=[ext_optional.ExtOptional(OPTIONAL_VERSION)])


# -- reading cel-expr-python's serialized ASTs (protobuf wire format, cel.expr.CheckedExpr / ParsedExpr) ------------
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def _fields(buf: bytes) -> dict[int, list[Any]]:
    """Field number -> values (ints for varints and fixed, bytes for length-delimited)."""
    out: dict[int, list[Any]] = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _one(fields: dict[int, list[Any]], number: int, default: Any = b"") -> Any:
    return fields.get(number, [default])[-1]


_PRIMITIVE_NAMES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN_NAMES = {1: "any", 2: "timestamp", 3: "duration"}


def _type_spec(buf: bytes) -> str:
    """A cel.expr.Type as ``list(int)``, ``map(string, dyn)``, ``kubernetes.Quantity``, ``optional_type(int)``."""
    f = _fields(buf)
    if 1 in f:
        return "dyn"
    if 2 in f:
        return "null_type"
    if 3 in f:
        return _PRIMITIVE_NAMES.get(_one(f, 3), "?")
    if 4 in f:
        return f"wrapper({_PRIMITIVE_NAMES.get(_one(f, 4), '?')})"
    if 5 in f:
        return _WELL_KNOWN_NAMES.get(_one(f, 5), "?")
    if 6 in f:
        return f"list({_type_spec(_one(_fields(_one(f, 6)), 1))})"
    if 7 in f:
        m = _fields(_one(f, 7))
        return f"map({_type_spec(_one(m, 1))}, {_type_spec(_one(m, 2))})"
    if 9 in f:
        return str(_one(f, 9).decode())
    if 10 in f:
        return "~" + str(_one(f, 10).decode())
    if 11 in f:
        return f"type({_type_spec(_one(f, 11))})" if _one(f, 11) else "type"
    if 12 in f:
        return "*error*"
    if 14 in f:
        a = _fields(_one(f, 14))
        params = [_type_spec(p) for p in a.get(2, [])]
        return str(_one(a, 1).decode()) + (f"({', '.join(params)})" if params else "")
    return "?"


def declared_type(spec: str) -> str:
    """The type a variable's field gets in ``variables`` (composition.go ``convertCelTypeToDeclType``): primitives,
    and lists and maps of declared types, keep theirs; anything else (a quantity, a message, an optional) is dyn."""
    if spec in _PRIMITIVES:
        return spec
    desc = _type_desc(spec)
    if desc["type_name"] in ("list", "map") and "params" in desc:
        return f"{desc['type_name']}({', '.join(declared_type(_spec_of(p)) for p in desc['params'])})"
    return "dyn"


@dataclass
class Node:
    id: int
    kind: int  # the cel.expr.Expr field: 3 const, 4 ident, 5 select, 6 call, 7 list, 8 struct, 9 comprehension
    body: dict[int, list[Any]]
    calls_above: tuple[str, ...]  # the functions of the calls this node is inside


def _walk(buf: bytes, calls_above: tuple[str, ...] = ()) -> Iterator[Node]:
    f = _fields(buf)
    kind = next((k for k in (3, 4, 5, 6, 7, 8, 9) if k in f), 0)
    body = _fields(_one(f, kind)) if kind else {}
    yield Node(_one(f, 2, 0), kind, body, calls_above)
    if kind == 5:
        yield from _walk(_one(body, 1), calls_above)
    elif kind == 6:
        inner = (*calls_above, _one(body, 2).decode())
        for child in [*body.get(1, []), *body.get(3, [])]:
            yield from _walk(child, inner)
    elif kind == 7:
        for child in body.get(1, []):
            yield from _walk(child, calls_above)
    elif kind == 8:
        for entry in body.get(2, []):
            e = _fields(entry)
            for child in [*e.get(3, []), *e.get(4, [])]:
                yield from _walk(child, calls_above)
    elif kind == 9:
        for number in (2, 4, 5, 6, 7):
            if number in body:
                yield from _walk(_one(body, number), calls_above)


def _packed(values: list[Any]) -> list[int]:
    out: list[int] = []
    for v in values:
        if isinstance(v, bytes):
            i = 0
            while i < len(v):
                n, i = _varint(v, i)
                out.append(n)
        else:
            out.append(v)
    return out


@dataclass
class Checked:
    """A compiled expression: its root type, and each node's type and source offset."""

    root: str
    types: dict[int, str]
    positions: dict[int, int]
    nodes: list[Node]


def _checked(serialized: bytes) -> Checked:
    message = _fields(_one(_fields(serialized), 2))  # Any.value: a cel.expr.CheckedExpr
    types = {}
    for entry in message.get(3, []):  # type_map
        e = _fields(entry)
        types[_one(e, 1, 0)] = _type_spec(_one(e, 2))
    source = _fields(_one(message, 5))
    positions = {}
    for entry in source.get(4, []):
        e = _fields(entry)
        positions[_one(e, 1, 0)] = _one(e, 2, 0)
    nodes = list(_walk(_one(message, 4)))
    return Checked(types.get(nodes[0].id, "dyn"), types, positions, nodes)


def _parsed_nodes(serialized: bytes) -> tuple[list[Node], dict[int, int]]:
    message = _fields(_one(_fields(serialized), 2))  # Any.value: a cel.expr.ParsedExpr
    source = _fields(_one(message, 3))
    positions = {}
    for entry in source.get(4, []):
        e = _fields(entry)
        positions[_one(e, 1, 0)] = _one(e, 2, 0)
    return list(_walk(_one(message, 2))), positions


# -- the checks cel-expr-python does not do ---------------------------------------------------------------------------
def _where(expression: str, offset: int) -> str:
    before = expression[:offset]
    return f"<input>:{before.count(chr(10)) + 1}:{offset - (before.rfind(chr(10)) + 1) + 1}"


def _homogeneous(expression: str, checked: Checked) -> list[str]:
    """cel-go's ValidateHomogeneousAggregateLiterals (cel/validator.go): in each list literal every element has the
    first one's type (an optional element's, unwrapped); in each map literal every key the first key's and every
    value the first value's; literals anywhere inside a ``format`` call are exempt."""
    errors = []

    def unwrap(spec: str) -> str:
        return spec[len("optional_type("):-1] if spec.startswith("optional_type(") else spec

    def mismatch(node_id: int, expected: str, found: str) -> None:
        errors.append(f"ERROR: {_where(expression, checked.positions.get(node_id, 0))}: "
                      f"expected type '{expected}' but found '{found}'")

    for node in checked.nodes:
        if "format" in node.calls_above:
            continue
        if node.kind == 7:
            optional = set(_packed(node.body.get(2, [])))
            first: str | None = None
            for i, element in enumerate(node.body.get(1, [])):
                element_id = _one(_fields(element), 2, 0)
                spec = checked.types.get(element_id, "dyn")
                spec = unwrap(spec) if i in optional else spec
                if first is None:
                    first = spec
                elif not _equivalent(first, spec):
                    mismatch(element_id, first, spec)
                    break
        elif node.kind == 8 and not _one(node.body, 1):  # a map literal (no message name)
            key_type: str | None = None
            value_type: str | None = None
            for entry in node.body.get(2, []):
                e = _fields(entry)
                key_id, value_id = _one(_fields(_one(e, 3)), 2, 0), _one(_fields(_one(e, 4)), 2, 0)
                kt, vt = checked.types.get(key_id, "dyn"), checked.types.get(value_id, "dyn")
                if _one(e, 5, 0):
                    vt = unwrap(vt)
                if key_type is None or value_type is None:
                    key_type, value_type = kt, vt
                    continue
                if not _equivalent(key_type, kt):
                    mismatch(key_id, key_type, kt)
                if not _equivalent(value_type, vt):
                    mismatch(value_id, value_type, vt)
    return errors


def _equivalent(a: str, b: str) -> bool:
    """cel-go's Type.IsEquivalentType: same kind, name and parameters; type parameters' names do not count."""
    return re.sub(r"~\w+", "~", a) == re.sub(r"~\w+", "~", b)


_DURATION = re.compile(r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")
_NANOS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
          "h": 3600 * 10**9}
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))")


def _valid_duration(text: str) -> bool:
    """Go's time.ParseDuration, which cel-go's duration() uses."""
    if text in ("0", "+0", "-0"):
        return True
    if not _DURATION.fullmatch(text):
        return False
    total = sum(float(n or 0) * _NANOS[u] for n, u in re.findall(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)", text))
    return total <= 2**63 - 1


def _valid_timestamp(text: str) -> bool:
    """Go's time.Parse(time.RFC3339, ...), which cel-go's timestamp() uses."""
    m = _RFC3339.fullmatch(text)
    if not m:
        return False
    try:
        year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return m.group(9) is None or (int(m.group(9)) < 24 and int(m.group(10)) < 60)


def _literals(expression: str, checked: Checked) -> list[str]:
    """cel-go's ValidateDurationLiterals and ValidateTimestampLiterals: a constant argument must parse."""
    errors = []
    for node in checked.nodes:
        if node.kind != 6 or node.body.get(1) or len(node.body.get(3, [])) != 1:
            continue
        function = _one(node.body, 2).decode()
        if function not in ("duration", "timestamp"):
            continue
        arg = _fields(_one(node.body, 3))
        const = _fields(_one(arg, 3)) if 3 in arg else {}
        if 6 not in const:
            continue
        text = _one(const, 6).decode()
        if not (_valid_duration if function == "duration" else _valid_timestamp)(text):
            errors.append(f"ERROR: {_where(expression, checked.positions.get(_one(arg, 2, 0), 0))}: "
                          f"invalid {function} argument: {text!r}")
    return errors


def _has_of_variables(env: Any, expression: str) -> list[str]:
    """``has(variables.x)``: cel-cpp types a presence test of a declared qualified name as the name's own type."""
    nodes, positions = _parsed_nodes(env.compile(expression, disable_check=True).serialize())
    errors = []
    for node in nodes:
        if node.kind == 5 and _one(node.body, 3, 0):
            operand = _fields(_one(node.body, 1))
            if 4 in operand and _one(_fields(_one(operand, 4)), 1).decode() == "variables":
                errors.append(f"ERROR: {_where(expression, positions.get(node.id, 0))}: has(variables."
                              f"{_one(node.body, 2).decode()}) is not checked here (cel-cpp mistypes it; upstream it "
                              "is always true): drop the has()")
    return errors


# -- compiling --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    errors: tuple[str, ...]
    type: str  # the root type, "dyn" when it did not compile


def _clean(error: Exception) -> list[str]:
    """cel-expr-python's error text, without the status wrapping and the echoed source lines."""
    text = str(error)
    text = re.sub(r"^\w+: ", "", text.strip())
    text = re.sub(r" \[\w+\]$", "", text)
    lines = [ln for ln in text.splitlines() if ln.startswith("ERROR:")]
    return lines or [text]


@functools.lru_cache(maxsize=4096)
def compile_expression(expression: str, scope: Scope = Scope()) -> Result:
    """Compile as the apiserver would: the checker's errors, then the validators it runs after checking."""
    env = _env(scope)
    try:
        compiled = env.compile(expression)
    except Exception as exc:  # cel-expr-python raises RuntimeError (INVALID_ARGUMENT) on any compile error
        return Result(tuple(_clean(exc)), "dyn")
    checked = _checked(compiled.serialize())
    errors = _homogeneous(expression, checked) + _literals(expression, checked)
    if scope.variables and "variables" in expression:
        errors += _has_of_variables(env, expression)
    return Result(tuple(errors), checked.root)


BOOL, STRING = ("bool",), ("string",)
# What a JSONPatch mutation must evaluate to (k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch/json_patch.go).
JSON_PATCHES = ("list(JSONPatch)",)


def _problem_text(result: Result, expected: tuple[str, ...] | None) -> str | None:
    if result.errors:
        return "compilation failed: " + "; ".join(result.errors)
    if expected is not None and result.type not in expected:
        wanted = expected[0] if len(expected) == 1 else f"one of [{', '.join(expected)}]"
        return f"must evaluate to {wanted} but got {result.type}"
    return None


def check_policy(policy: Mapping[str, Any]) -> list[str]:
    """Every problem of an admission policy's CEL, each as ``KIND NAME: FIELD: MESSAGE``. Empty: the policy's
    expressions compile as a 1.30 apiserver compiles a new ValidatingAdmissionPolicy, or a 1.36 one a new
    MutatingAdmissionPolicy (see the module's docstring for what that covers)."""
    kind = policy.get("kind", "ValidatingAdmissionPolicy")
    name = (policy.get("metadata") or {}).get("name", "")
    spec = policy.get("spec") or {}
    params = spec.get("paramKind") is not None
    mutating = kind == "MutatingAdmissionPolicy"
    problems: list[str] = []

    def check(field: str, expression: str, scope: Scope, expected: tuple[str, ...] | None) -> Result:
        result = compile_expression(expression, scope)
        text = _problem_text(result, expected)
        if text:
            problems.append(f"{kind} {name}: {field}: {text}")
        return result

    # matchConditions: the stateless compiler, no variables (validation.go validateMatchConditionsExpression).
    for i, condition in enumerate(spec.get("matchConditions") or []):
        check(f"spec.matchConditions[{i}].expression", condition["expression"],
              Scope(params=params, mutating=mutating), BOOL)
    composited = bool(spec.get("variables")) or mutating
    declared: list[tuple[str, str]] = []
    for i, variable in enumerate(spec.get("variables") or []):
        result = check(f"spec.variables[{i}].expression", variable["expression"],
                       Scope(params=params, variables=tuple(declared), mutating=mutating), None)
        declared.append((variable["name"], declared_type(result.type) if not result.errors else "dyn"))
    variables = tuple(declared) if composited else None
    for i, validation in enumerate(spec.get("validations") or []):
        check(f"spec.validations[{i}].expression", validation["expression"],
              Scope(params=params, variables=variables), BOOL)
        if (validation.get("messageExpression") or "").strip():
            check(f"spec.validations[{i}].messageExpression", validation["messageExpression"],
                  Scope(params=params, authorizer=False, variables=variables), STRING)
    for i, annotation in enumerate(spec.get("auditAnnotations") or []):
        check(f"spec.auditAnnotations[{i}].valueExpression", annotation["valueExpression"],
              Scope(params=params, variables=variables), ("string", "null_type"))
    for i, mutation in enumerate(spec.get("mutations") or []):
        where = f"spec.mutations[{i}]"
        if mutation.get("patchType") != "JSONPatch":
            # An ApplyConfiguration builds Object{...} values typed from the schema of the object at run time: not
            # declared here, so refused rather than passed unchecked.
            problems.append(f"{kind} {name}: {where}: patchType {mutation.get('patchType')!r}: only JSONPatch "
                            "mutations are checked here")
            continue
        check(f"{where}.jsonPatch.expression", mutation["jsonPatch"]["expression"],
              Scope(params=params, variables=variables, mutating=True), JSON_PATCHES)
    return problems


def check_policies(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """``check_policy`` over the admission policies among ``objects`` (other kinds are skipped)."""
    kinds = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
    return [p for o in objects if o and o.get("kind") in kinds for p in check_policy(o)]


@functools.lru_cache(maxsize=256)
def _check_json(text: str) -> tuple[str, ...]:
    return tuple(check_policy(json.loads(text)))


def require_clean(policy: Mapping[str, Any]) -> None:
    """Raise when ``check_policy`` finds anything: for evaluators, which should never run what the apiserver would
    refuse to store."""
    problems = _check_json(json.dumps(policy, sort_keys=True, default=str))
    if problems:
        raise PolicyTypeError(list(problems))


class PolicyTypeError(AssertionError):
    """A policy the apiserver would refuse at write time: its CEL does not type-check."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the apiserver would refuse this policy:\n" + "\n".join(problems))
        self.problems = problems
