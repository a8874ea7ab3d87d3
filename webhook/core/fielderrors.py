"""Kubernetes ``field.Error`` and ``utilerrors.Aggregate`` texts, so our messages read like upstream's.

Hand-written: these are tiny string formats from apimachinery (``util/validation/field/errors.go``,
``util/errors/errors.go``); no Python library reproduces them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


def go_quote(value: str) -> str:
    """Go's ``%q`` for ordinary strings (printable text kept, quotes and controls escaped)."""
    return json.dumps(value, ensure_ascii=False)


def go_value(value: object) -> str:
    """A bad value as ``field.Error`` prints it: strings quoted, numbers and booleans bare (``%v``), anything else
    as compact JSON (``json.Marshal``)."""
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def invalid(path: str, value: object, detail: str) -> str:
    """``<path>: Invalid value: "<value>": <detail>`` (strings quoted, numbers bare, as upstream)."""
    shown = go_value(value)
    return f"{path}: Invalid value: {shown}: {detail}" if detail else f"{path}: Invalid value: {shown}"


def required(path: str, detail: str) -> str:
    return f"{path}: Required value: {detail}" if detail else f"{path}: Required value"


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}" if detail else f"{path}: Forbidden"


def not_supported(path: str, value: object, supported: Iterable[str]) -> str:
    """``<path>: Unsupported value: "<value>": supported values: "a", "b"`` (``field.NotSupported``)."""
    values = ", ".join(go_quote(v) for v in supported)
    return f"{path}: Unsupported value: {go_value(value)}: supported values: {values}"


def duplicate(path: str, value: object) -> str:
    return f"{path}: Duplicate value: {go_value(value)}"


def too_long(path: str, limit: int) -> str:
    """``field.TooLong``: ``<path>: Too long: may not be more than <limit> bytes``."""
    return f"{path}: Too long: may not be more than {limit} {'byte' if limit == 1 else 'bytes'}"


def aggregate(errors: Iterable[str]) -> str:
    """One error prints as itself, several as ``[e1, e2]``; repeats are dropped (utilerrors.Aggregate)."""
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    if not seen:
        return ""
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"
