"""A ValidatingAdmissionPolicy evaluated as the apiserver evaluates it, with cel-python, for the tests.

No apiserver runs in the tests, so this follows upstream's order (k8s.io/apiserver ``plugin/policy/validating``):
the binding's and policy's match (resource rules, operations, the binding's namespace selector), then
``matchConditions`` (all must hold), then every validation, the ``variables`` evaluated when first read and kept
(``plugin/cel/composition.go``, a lazy map); the answer names the first
that failed, with its ``messageExpression`` (else its ``message``), as the apiserver's denial does. An expression
that errs is a failure as ``failurePolicy`` says (Fail: refused with the error).

cel-python has none of the Kubernetes CEL libraries, so the functions the policies call are written here:
- quantity (k8s.io/apiserver/pkg/cel/library/quantity.go, in the base environment from 1.28) on top of ``webhook.core.quantity`` (the apiserver's
  grammar and exact values): ``quantity``, ``isQuantity``, ``sign``, ``isInteger`` (the value fits an int64
  without loss: ``AsInt64`` succeeds), ``asInteger``, ``asApproximateFloat``, ``compareTo``, ``isLessThan``,
  ``isGreaterThan``, ``add``, ``sub``;
- lists (library/lists.go): ``indexOf``, ``lastIndexOf``;
- strings (cel-go ext strings, in the apiserver's base environment): ``join``, ``split``, ``indexOf`` on strings.
A call of any other extension function fails here as an unknown function, so a policy using one is noticed.

cel-python does not type-check either, so ``Policy`` first compiles the policy with ``tests/cel_check.py`` (the
apiserver's environment and type checker) and refuses one the apiserver would not store: no evaluation passes on
a policy a real apiserver refuses (``quantity(x).sign()`` did: ``sign`` is a global).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from tests.cel_check import require_clean
from webhook.core.quantity import QuantityError, parse_quantity

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_MESSAGE_BYTES = 5 * 1024  # k8s.io/apiserver/pkg/apis/cel MaxEvaluatedMessageExpressionSizeBytes


class Quantity:
    """A ``resource.Quantity`` value in CEL: an exact Decimal."""

    __slots__ = ("value",)

    def __init__(self, value: Decimal) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"quantity({self.value})"


def _q(arg: Any) -> Decimal:
    if not isinstance(arg, Quantity):
        raise TypeError(f"no such overload: {type(arg).__name__} is not a quantity")
    return arg.value


def _cmp(a: Decimal, b: Decimal) -> int:
    return (a > b) - (a < b)


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError(f"no such overload: quantity({type(text).__name__})")
    try:
        return Quantity(parse_quantity(str(text)))
    except QuantityError as exc:
        raise ValueError(f"quantities must match the regular expression: {exc}") from None


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _is_integer(q: Any) -> celtypes.BoolType:
    v = _q(q)
    return celtypes.BoolType(v == v.to_integral_value() and INT64_MIN <= v <= INT64_MAX)


def _as_integer(q: Any) -> celtypes.IntType:
    if not _is_integer(q):
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(int(_q(q)))


def _other(arg: Any) -> Decimal:
    return Decimal(int(arg)) if isinstance(arg, int) and not isinstance(arg, bool) else _q(arg)


def _index_of(target: Any, item: Any) -> celtypes.IntType:
    if isinstance(target, str):
        return celtypes.IntType(str(target).find(str(item)))
    for i, x in enumerate(target):
        if x == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _last_index_of(target: Any, item: Any) -> celtypes.IntType:
    if isinstance(target, str):
        return celtypes.IntType(str(target).rfind(str(item)))
    found = -1
    for i, x in enumerate(target):
        if x == item:
            found = i
    return celtypes.IntType(found)


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    if not all(isinstance(x, str) for x in items):
        raise TypeError("no such overload: join of a list that is not list(string)")
    return celtypes.StringType(str(sep).join(str(x) for x in items))


def _split(text: Any, sep: Any) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(s) for s in str(text).split(str(sep))])


def _sign(q: Any) -> celtypes.IntType:
    return celtypes.IntType(_cmp(_q(q), Decimal(0)))


def _as_approximate_float(q: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_q(q)))


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_cmp(_q(a), _q(b)))


def _is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a) < _q(b))


def _is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a) > _q(b))


def _add(a: Any, b: Any) -> Quantity:
    return Quantity(_q(a) + _other(b))


def _sub(a: Any, b: Any) -> Quantity:
    return Quantity(_q(a) - _other(b))


# Named functions, not lambdas: cel-python's transpiler writes each function's qualified name into Python source.
FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "compareTo": _compare_to,
    "isLessThan": _is_less_than,
    "isGreaterThan": _is_greater_than,
    "add": _add,
    "sub": _sub,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "join": _join,
    "split": _split,
}


@dataclass(frozen=True)
class Outcome:
    """What the apiserver answers for one request: admitted, or refused with the policy's message."""

    matched: bool
    allowed: bool
    message: str = ""
    reason: str = ""
    error: bool = False  # an expression erred (failurePolicy decided)


ADMITTED = Outcome(matched=False, allowed=True)


def _selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions: In, NotIn, Exists, DoesNotExist)."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _rule_matches(rule: dict[str, Any], request: dict[str, Any]) -> bool:
    res = request["resource"]
    resource = res["resource"] + ("/" + request["subResource"] if request.get("subResource") else "")

    def has(field: str, value: str) -> bool:
        return "*" in rule.get(field, []) or value in rule.get(field, [])

    return (has("apiGroups", res["group"]) and has("apiVersions", res["version"])
            and has("operations", request["operation"]) and has("resources", resource))


class _Variables(celtypes.MapType):
    """``variables``, each evaluated when first read and then kept, as upstream's composition environment does
    (a variable no expression reaches is never evaluated, so its cost is never paid)."""

    def __init__(self, programs: list[tuple[str, Any]], activation: dict[str, Any]) -> None:
        super().__init__()
        self.programs = dict(programs)
        self.activation = activation

    def __contains__(self, key: object) -> bool:
        return str(key) in self.programs

    def __getitem__(self, key: Any) -> Any:
        name = str(key)
        kept: dict[Any, Any] = self  # the plain dict below MapType, its keys the names as str
        if not dict.__contains__(kept, name):
            if name not in self.programs:
                raise KeyError(name)
            dict.__setitem__(kept, name, self.programs[name].evaluate(self.activation))
        return dict.__getitem__(kept, name)


class Policy:
    """A ValidatingAdmissionPolicy and a binding, compiled once."""

    def __init__(self, policy: dict[str, Any], binding: dict[str, Any] | None = None) -> None:
        require_clean(policy)  # what the apiserver would refuse to store is never evaluated (tests/cel_check.py)
        self.env = celpy.Environment()
        spec = policy["spec"]
        self.spec, self.binding = spec, (binding or {}).get("spec", {})
        self.failure_policy = spec.get("failurePolicy", "Fail")
        self.match = [self._compile(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(self._compile(v["expression"]), v.get("message"),
                             self._compile(v["messageExpression"]) if "messageExpression" in v else None,
                             v.get("reason", "Invalid"))
                            for v in spec["validations"]]

    def _compile(self, expr: str) -> Any:
        return self.env.program(self.env.compile(expr), functions=FUNCTIONS)

    def matches(self, request: dict[str, Any], namespace_labels: dict[str, str] | None = None) -> bool:
        constraints = self.spec.get("matchConstraints", {})
        if not any(_rule_matches(r, request) for r in constraints.get("resourceRules", [])):
            return False
        labels = {"kubernetes.io/metadata.name": request.get("namespace", ""), **(namespace_labels or {})}
        selectors = [constraints.get("namespaceSelector"), self.binding.get("matchResources", {}).get(
            "namespaceSelector")]
        if not all(_selector_matches(s, labels) for s in selectors):
            return False
        # The binding's objectSelector: the object's labels (the old object's on DELETE, where there is none).
        obj = request.get("object") or request.get("oldObject") or {}
        object_labels = (obj.get("metadata") or {}).get("labels") or {}
        return _selector_matches(self.binding.get("matchResources", {}).get("objectSelector"), object_labels)

    def evaluate(self, request: dict[str, Any], namespace_labels: dict[str, str] | None = None) -> Outcome:
        """``request``: an AdmissionRequest as a dict, with ``object`` and ``oldObject``."""
        if not self.matches(request, namespace_labels):
            return ADMITTED
        activation: dict[str, Any] = {"request": json_to_cel(request),
                                      "object": json_to_cel(request.get("object")),
                                      "oldObject": json_to_cel(request.get("oldObject")),
                                      # The request's Namespace as the apiserver's informer holds it (name, labels).
                                      "namespaceObject": json_to_cel({"metadata": {
                                          "name": request.get("namespace", ""),
                                          "labels": {"kubernetes.io/metadata.name": request.get("namespace", ""),
                                                     **(namespace_labels or {})}}})}
        try:
            if not all(bool(m.evaluate(activation)) for m in self.match):
                return ADMITTED
            activation["variables"] = _Variables(self.variables, activation)
            for check, message, message_expr, reason in self.validations:
                verdict = check.evaluate(activation)
                if isinstance(verdict, CELEvalError):
                    raise verdict
                if not bool(verdict):
                    text = message_expr.evaluate(activation) if message_expr is not None else None
                    if isinstance(text, CELEvalError):
                        text = None
                    # Upstream (plugin/policy/validating/validator.go) trims the text, drops one over
                    # MaxEvaluatedMessageExpressionSizeBytes or with a line break, and then uses message.
                    text = str(text).strip() if text is not None else ""
                    if len(text.encode()) > MAX_MESSAGE_BYTES or "\n" in text:
                        text = ""
                    shown = text or " ".join(str(message or "").split())
                    return Outcome(matched=True, allowed=False, message=shown, reason=reason)
        except (CELEvalError, TypeError, ValueError, KeyError) as exc:
            if self.failure_policy == "Ignore":
                return Outcome(matched=True, allowed=True, error=True, message=str(exc))
            return Outcome(matched=True, allowed=False, error=True, message=f"expression error: {exc}")
        return Outcome(matched=True, allowed=True)


    def first_failure(self, request: dict[str, Any], obj: Any = None, old: Any = None) -> str | None:
        """None when admitted (or not matched), else the refusal's message: the shape of
        tests/deploy/test_agent_node_policy.py's evaluator, so that file can use this one."""
        outcome = self.evaluate({**request, "object": obj, "oldObject": old})
        return None if outcome.allowed else outcome.message


def policy_and_binding(docs: list[dict[str, Any]]) -> Policy:
    """The Policy of a component's documents: one ValidatingAdmissionPolicy and its binding."""
    (policy,) = [d for d in docs if d.get("kind") == "ValidatingAdmissionPolicy"]
    bindings = [d for d in docs if d.get("kind") == "ValidatingAdmissionPolicyBinding"
                and d["spec"]["policyName"] == policy["metadata"]["name"]]
    return Policy(policy, bindings[0] if bindings else None)
