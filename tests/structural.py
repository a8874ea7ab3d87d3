"""The apiserver's structural-schema rules for a CRD's ``openAPIV3Schema``, as upstream states and checks them
(Kubernetes docs, "Specifying a structural schema"; apiextensions-apiserver ``pkg/apiserver/schema``), so the tests
can refuse a CRD the apiserver would refuse. Written here for the tests: no Python library checks them, and
parsing or validating objects against the schema (jsonschema) says nothing about whether the apiserver takes it.

The rules, with upstream's field paths and texts:

- every node has a ``type``, unless it is ``x-kubernetes-int-or-string`` or ``x-kubernetes-preserve-unknown-fields``
  (``Required value: must not be empty for specified object fields``, ``... for specified array items``, ``... at the
  root``); the root is an object and has no ``additionalProperties``; an array has ``items``;
- inside ``allOf``/``anyOf``/``oneOf``/``not`` no ``type``, ``title``, ``description``, ``default``,
  ``additionalProperties``, ``nullable`` or ``x-kubernetes-*`` (``Forbidden: must be empty to be structural`` and its
  siblings), except the two int-or-string forms: ``anyOf: [{type: integer}, {type: string}]`` exactly, or an
  ``allOf`` whose first item is that ``anyOf``;
- a field or array named inside a junctor is also named outside it (``Required value: because it is defined in
  ...``);
- ``metadata`` at the root restricts ``name`` and ``generateName`` at most, and is named in no junctor;
- ``x-kubernetes-int-or-string`` goes with no ``type`` and no ``x-kubernetes-preserve-unknown-fields``.
"""

from __future__ import annotations

from typing import Any

ROOT = "spec.versions[0].schema.openAPIV3Schema"
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
JUNCTORS = ("allOf", "anyOf", "oneOf")
# What a junctor may not carry, and how upstream says so.
FORBIDDEN_IN_JUNCTORS = {
    "type": "must be empty", "title": "must be empty", "description": "must be empty",
    "additionalProperties": "must be undefined", "default": "must be undefined", "nullable": "must be false",
    "x-kubernetes-preserve-unknown-fields": "must be false", "x-kubernetes-embedded-resource": "must be false",
    "x-kubernetes-int-or-string": "must be false", "x-kubernetes-list-map-keys": "must be empty",
    "x-kubernetes-list-type": "must be undefined",
}
TYPE_REQUIRED = {"root": "must not be empty at the root", "item": "must not be empty for specified array items",
                 "field": "must not be empty for specified object fields"}


def structural_errors(schema: dict[str, Any], path: str = ROOT) -> list[str]:
    """Every reason the apiserver would refuse ``schema`` as not structural; empty when it takes it."""
    errors: list[str] = []
    _node(schema, "root", path, errors)
    _complete(schema, path, errors)
    return sorted(errors)


def _node(s: dict[str, Any], level: str, path: str, errors: list[str]) -> None:
    if s.get("type") == "array" and "items" not in s:
        errors.append(f"{path}.items: Required value: must be specified")
    if isinstance(s.get("items"), dict):
        _node(s["items"], "item", f"{path}.items", errors)
    for name, field in (s.get("properties") or {}).items():
        _node(field, "field", f"{path}.properties[{name}]", errors)
    extra = s.get("additionalProperties")
    if extra is not None:
        if level == "root":
            errors.append(f"{path}.additionalProperties: Forbidden: must not be used at the root")
        if isinstance(extra, dict):
            _node(extra, "field", f"{path}.additionalProperties", errors)
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    if int_or_string and s.get("x-kubernetes-preserve-unknown-fields"):
        errors.append(f"{path}.x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if "
                      "x-kubernetes-int-or-string is true")
    if int_or_string and s.get("type"):
        errors.append(f'{path}.type: Invalid value: "{s["type"]}": must be empty if x-kubernetes-int-or-string is true')
    all_of = s.get("allOf") or []
    _junctors(s, s.get("anyOf") == INT_OR_STRING,
              bool(all_of) and isinstance(all_of[0], dict) and all_of[0].get("anyOf") == INT_OR_STRING, path, errors)
    if not s.get("type") and not int_or_string and not s.get("x-kubernetes-preserve-unknown-fields"):
        errors.append(f"{path}.type: Required value: {TYPE_REQUIRED[level]}")
    if level == "root" and s.get("type") not in (None, "", "object"):
        errors.append(f'{path}.type: Invalid value: "{s["type"]}": must be object at the root')
    metadata = (s.get("properties") or {}).get("metadata")
    if level == "root" and metadata is not None:
        names = set(metadata.get("properties") or {})
        rest = set(metadata) - {"type", "default", "properties"}
        if rest or not names <= {"name", "generateName"}:
            errors.append(f"{path}.properties[metadata]: Forbidden: must not specify anything other than name and "
                          "generateName, but metadata is implicitly specified")


def _junctors(s: dict[str, Any], skip_any_of: bool, skip_first_all_of: bool, path: str, errors: list[str]) -> None:
    """The value validations under ``s``'s junctors (upstream's validateValueValidation)."""
    for junctor in JUNCTORS:
        if junctor == "anyOf" and skip_any_of:
            continue
        for i, inner in enumerate(s.get(junctor) or []):
            skip = junctor == "allOf" and i == 0 and skip_first_all_of
            _nested(inner, skip, f"{path}.{junctor}[{i}]", errors)
    if isinstance(s.get("not"), dict):
        _nested(s["not"], False, f"{path}.not", errors)


def _nested(v: dict[str, Any], skip_any_of: bool, path: str, errors: list[str]) -> None:
    _junctors(v, skip_any_of, False, path, errors)
    if isinstance(v.get("items"), dict):
        _nested(v["items"], False, f"{path}.items", errors)
    for name, field in (v.get("properties") or {}).items():
        _nested(field, False, f"{path}.properties[{name}]", errors)
    for key, how in FORBIDDEN_IN_JUNCTORS.items():
        if key in v and v[key] not in (False, "", [], None):
            errors.append(f"{path}.{key}: Forbidden: {how} to be structural")
    if "metadata" in (v.get("properties") or {}):
        errors.append(f"{path}.properties[metadata]: Forbidden: must not be specified in a nested context")


def _complete(s: dict[str, Any], path: str, errors: list[str]) -> None:
    """Every field and array a junctor names is named outside it too (upstream's completeness check)."""
    for junctor in (*JUNCTORS, "not"):
        inner = s.get(junctor)
        for i, v in enumerate(inner if isinstance(inner, list) else [inner] if isinstance(inner, dict) else []):
            where = f"{path}.{junctor}" + (f"[{i}]" if junctor != "not" else "")
            _covered(v, s, path, where, errors)
    if isinstance(s.get("items"), dict):
        _complete(s["items"], f"{path}.items", errors)
    for name, field in (s.get("properties") or {}).items():
        _complete(field, f"{path}.properties[{name}]", errors)
    if isinstance(s.get("additionalProperties"), dict):
        _complete(s["additionalProperties"], f"{path}.additionalProperties", errors)


def _covered(v: dict[str, Any], s: dict[str, Any] | None, s_path: str, v_path: str, errors: list[str]) -> None:
    if s is None:
        errors.append(f"{s_path}: Required value: because it is defined in {v_path}")
        return
    for junctor in (*JUNCTORS, "not"):
        inner = v.get(junctor)
        for i, w in enumerate(inner if isinstance(inner, list) else [inner] if isinstance(inner, dict) else []):
            _covered(w, s, s_path, f"{v_path}.{junctor}" + (f"[{i}]" if junctor != "not" else ""), errors)
    if isinstance(v.get("items"), dict):
        _covered(v["items"], s.get("items"), f"{s_path}.items", f"{v_path}.items", errors)
    for name, field in (v.get("properties") or {}).items():
        _covered(field, (s.get("properties") or {}).get(name), f"{s_path}.properties[{name}]",
                 f"{v_path}.properties[{name}]", errors)
