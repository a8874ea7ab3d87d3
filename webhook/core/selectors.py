"""Label selectors (metav1.LabelSelector) over plain label maps.

Hand-written: no maintained PyPI package evaluates Kubernetes selectors. Pure and side-effect free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(ValueError):
    """A selector that cannot be evaluated; the message names the offending part."""


def validate_selector(selector: Any, where: str = "selector") -> None:
    """Raise SelectorError when ``selector`` is not a well-formed LabelSelector."""
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise SelectorError(f"{where}: must be an object, got {type(selector).__name__}")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SelectorError(f"{where}.matchLabels: must be a map of strings")
    for k, v in labels.items():
        if not isinstance(v, str):
            raise SelectorError(f"{where}.matchLabels[{k}]: value must be a string, got {v!r}")
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list")
    for i, e in enumerate(exprs):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or not e.get("key"):
            raise SelectorError(f"{at}.key: Required value")
        op = e.get("operator")
        values = e.get("values") or []
        if op not in OPERATORS:
            raise SelectorError(f"{at}.operator: Unsupported value: {op!r}: supported values: "
                                + ", ".join(f'"{o}"' for o in OPERATORS))
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{at}.values: must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{at}.values: Forbidden: "
                                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")


def selector_is_empty(selector: Any) -> bool:
    """No selector, or one with neither matchLabels nor matchExpressions. Anything that is no map is not
    empty: ``validate_selector`` says what is wrong with it."""
    if not selector:
        return True
    return isinstance(selector, Mapping) and not selector.get("matchLabels") and not selector.get("matchExpressions")


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy ``selector``; None or an empty selector selects everything.

    Raises SelectorError for a malformed selector, so callers can fail closed with a reason.
    """
    if not selector:
        return True
    validate_selector(selector)
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        if not expression_matches(e["operator"], e["key"], e.get("values") or [], labels):
            return False
    return True


def expression_matches(op: str, key: str, values: list[str], labels: Mapping[str, str]) -> bool:
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise SelectorError(f"operator {op!r} is not supported")


class CompiledSelector:
    """A validated selector turned into tuples, for matching many pods against one selector.

    ``keys`` are the label keys the selector reads, so a caller can tell which selectors a
    label change can affect.
    """

    __slots__ = ("expressions", "keys", "match_labels")

    def __init__(self, match_labels: tuple[tuple[str, str], ...],
                 expressions: tuple[tuple[str, str, frozenset[str]], ...]) -> None:
        self.match_labels = match_labels
        self.expressions = expressions
        self.keys = frozenset(k for k, _ in match_labels) | frozenset(k for _, k, _ in expressions)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for op, key, values in self.expressions:
            if op == "In":
                if labels.get(key) not in values:
                    return False
            elif op == "NotIn":
                if key in labels and labels[key] in values:
                    return False
            elif op == "Exists":
                if key not in labels:
                    return False
            elif key in labels:  # DoesNotExist
                return False
        return True


def compile_selector(selector: Any, where: str = "selector") -> CompiledSelector | None:
    """Validate once and compile; None means "selects everything". Raises SelectorError."""
    validate_selector(selector, where)
    if selector_is_empty(selector):
        return None
    labels = tuple((k, v) for k, v in (selector.get("matchLabels") or {}).items())
    exprs = tuple((e["operator"], e["key"], frozenset(e.get("values") or ()))
                  for e in selector.get("matchExpressions") or [])
    return CompiledSelector(labels, exprs)


def describe_selector(selector: Any) -> str:
    """A kubectl-style one-line rendering: ``app=web,tier in (a,b),!x``."""
    if selector is None or selector_is_empty(selector):
        return "<everything>"
    if not isinstance(selector, Mapping):
        return repr(selector)
    labels = selector.get("matchLabels") or {}
    parts = [f"{k}={v}" for k, v in labels.items()] if isinstance(labels, Mapping) else [repr(labels)]
    for e in selector.get("matchExpressions") or []:
        if not isinstance(e, Mapping):
            parts.append(repr(e))
            continue
        op, key, values = str(e.get("operator")), e.get("key"), ",".join(e.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": f"{key}", "DoesNotExist": f"!{key}"}.get(op, f"{key} {op} ({values})"))
    return ",".join(parts)


_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<absent>[^\s,!=()]+)"
    r"|(?P<key>[^\s,!=()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,!=()]*)"
    r"|\s+(?P<set>in|notin)\s*\(\s*(?P<values>[^()]*)\)|(?=\s*(?:,|$))))\s*(?:,|$)")


def parse_selector(text: str) -> dict[str, Any]:
    """kubectl's ``-l`` syntax (``app=web,tier in (a,b),!canary,env!=dev``) as a LabelSelector; SelectorError
    naming the part it cannot read."""
    exprs: list[dict[str, Any]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _REQUIREMENT.match(text, pos)
        if m is None or m.end() == pos:
            raise SelectorError(f"cannot read the selector at {text[pos:]!r}: expected key, !key, key=value, "
                                "key!=value, key in (a,b) or key notin (a,b)")
        pos = m.end()
        if m["absent"]:
            exprs.append({"key": m["absent"], "operator": "DoesNotExist"})
        elif m["op"]:
            exprs.append({"key": m["key"], "operator": "NotIn" if m["op"] == "!=" else "In", "values": [m["value"]]})
        elif m["set"]:
            values = [v.strip() for v in m["values"].split(",") if v.strip()]
            exprs.append({"key": m["key"], "operator": "In" if m["set"] == "in" else "NotIn", "values": values})
        else:
            exprs.append({"key": m["key"], "operator": "Exists"})
    selector = {"matchExpressions": exprs}
    validate_selector(selector, "selector")
    return selector
