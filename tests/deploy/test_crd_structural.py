"""Every CRD the project ships is a structural schema by the apiserver's rules (tests/structural.py), and the checker
refuses what the apiserver refuses, with its paths and texts: among them the probability schema kube-apiserver
refused (`anyOf[0].type: Forbidden: must be empty to be structural`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.structural import ROOT, structural_errors

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
SPEC = f"{ROOT}.properties[spec]"


def _shipped_crds() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found.append((f"{path.relative_to(MANIFESTS)} {doc['metadata']['name']}", doc))
    return found


def test_there_are_crds_to_check() -> None:
    assert [name for name, _ in _shipped_crds()] == [
        "koordinator/crd-clustercolocationprofiles.yaml clustercolocationprofiles.config.koordinator.sh"]


@pytest.mark.parametrize(("name", "crd"), _shipped_crds(), ids=[n for n, _ in _shipped_crds()])
def test_every_shipped_crd_is_structural(name: str, crd: dict[str, Any]) -> None:
    for i, version in enumerate(crd["spec"]["versions"]):
        errors = structural_errors(version["schema"]["openAPIV3Schema"], f"spec.versions[{i}].schema.openAPIV3Schema")
        assert errors == [], f"{name} {version['name']}:\n" + "\n".join(errors)


def _spec(**fields: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                             "metadata": {"type": "object"},
                                             "spec": {"type": "object", "properties": fields}}}


REFUSED_PROBABILITY = {  # what the CRD held when kube-apiserver refused it
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"type": "string", "pattern": "^(100|[1-9]?[0-9])%$"}],
}


@pytest.mark.parametrize(("name", "schema", "expected"), [
    ("int-or-string with more inside its anyOf (refused by kube-apiserver)", _spec(probability=REFUSED_PROBABILITY), [
        f"{SPEC}.properties[probability].anyOf[0].type: Forbidden: must be empty to be structural",
        f"{SPEC}.properties[probability].anyOf[1].type: Forbidden: must be empty to be structural"]),
    ("a field without a type", _spec(name={"description": "x"}),
     [f"{SPEC}.properties[name].type: Required value: must not be empty for specified object fields"]),
    ("array items without a type", _spec(list={"type": "array", "items": {"description": "x"}}),
     [f"{SPEC}.properties[list].items.type: Required value: must not be empty for specified array items"]),
    ("an array without items", _spec(list={"type": "array"}),
     [f"{SPEC}.properties[list].items: Required value: must be specified"]),
    ("a description and nullable in a junctor", _spec(a={"type": "string", "anyOf": [
        {"description": "d", "pattern": "x"}, {"nullable": True, "maxLength": 3}]}), [
        f"{SPEC}.properties[a].anyOf[0].description: Forbidden: must be empty to be structural",
        f"{SPEC}.properties[a].anyOf[1].nullable: Forbidden: must be false to be structural"]),
    ("a default and additionalProperties in a junctor", _spec(m={"type": "object", "allOf": [
        {"default": {}}, {"additionalProperties": {"type": "string"}}]}), [
        f"{SPEC}.properties[m].allOf[0].default: Forbidden: must be undefined to be structural",
        f"{SPEC}.properties[m].allOf[1].additionalProperties: Forbidden: must be undefined to be structural"]),
    ("a field named only inside a junctor", _spec(o={"type": "object", "properties": {"a": {"type": "string"}},
                                                      "oneOf": [{"required": ["a"]}, {"properties": {"b": {}}}]}),
     [f"{SPEC}.properties[o].properties[b]: Required value: because it is defined in "
      f"{SPEC}.properties[o].oneOf[1].properties[b]"]),
    ("int-or-string with a type", _spec(p={"x-kubernetes-int-or-string": True, "type": "string"}),
     [f'{SPEC}.properties[p].type: Invalid value: "string": must be empty if x-kubernetes-int-or-string is true']),
    ("metadata restricted beyond name and generateName",
     {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}},
     [f"{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but "
      "metadata is implicitly specified"]),
    ("metadata in a junctor", _spec(o={"type": "object", "not": {"properties": {"metadata": {}}}}), [
        f"{SPEC}.properties[o].not.properties[metadata]: Forbidden: must not be specified in a nested context",
        f"{SPEC}.properties[o].properties[metadata]: Required value: because it is defined in "
        f"{SPEC}.properties[o].not.properties[metadata]"]),
    ("additionalProperties at the root", {"type": "object", "additionalProperties": {"type": "string"}},
     [f"{ROOT}.additionalProperties: Forbidden: must not be used at the root"]),
])
def test_the_checker_refuses_what_the_apiserver_refuses(name: str, schema: dict[str, Any],
                                                        expected: list[str]) -> None:
    assert structural_errors(schema) == sorted(expected), name


@pytest.mark.parametrize(("name", "field"), [
    ("int-or-string, the anyOf form, with bounds beside", {
        "x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": 0, "maximum": 100, "pattern": "^[0-9]+%$"}),
    ("int-or-string, the allOf form", {
        "x-kubernetes-int-or-string": True,
        "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"maxLength": 4}]}),
    ("int-or-string alone", {"x-kubernetes-int-or-string": True}),
    ("preserved unknown fields, no type", {"x-kubernetes-preserve-unknown-fields": True}),
    ("value validations in junctors", {"type": "object", "properties": {"a": {"type": "string"}},
                                       "anyOf": [{"required": ["a"]}, {"properties": {"a": {"minLength": 2}}}]}),
    ("metadata restricting its name", None),
])
def test_the_checker_takes_what_the_apiserver_takes(name: str, field: dict[str, Any] | None) -> None:
    if field is None:
        schema = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 63}}}}}
    else:
        schema = _spec(f=copy.deepcopy(field))
    assert structural_errors(schema) == [], name


def _shape(node: dict[str, Any]) -> Any:
    """What a schema node admits, without its descriptions and the value checks ours adds (bounds, patterns)."""
    keep = {"type", "format", "enum", "properties", "items", "additionalProperties", "required", "anyOf",
            "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
            "x-kubernetes-map-type"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in keep:
            continue
        if key == "properties":
            out[key] = {k: _shape(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _shape(value)
        else:
            out[key] = value
    return out


SELECTOR = {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {
        "type": "object", "required": ["key", "operator"], "properties": {
            "key": {"type": "string"}, "operator": {"type": "string"},
            "values": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}}}}}}}
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
# Koordinator's ClusterColocationProfile CRD (config/crd/bases, generated from its Go types), field by field.
KOORDINATOR_SPEC = {
    "namespaceSelector": SELECTOR, "selector": SELECTOR,
    "probability": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
    "qosClass": {"type": "string", "enum": ["LSE", "LSR", "LS", "BE", "SYSTEM"]},
    "priorityClassName": {"type": "string"}, "koordinatorPriority": {"type": "integer", "format": "int32"},
    "labels": STRINGS, "annotations": STRINGS, "labelKeysMapping": STRINGS, "annotationKeysMapping": STRINGS,
    "labelSuffixes": STRINGS, "schedulerName": {"type": "string"},
    "patch": {"x-kubernetes-preserve-unknown-fields": True},
}


def test_the_profile_crd_is_koordinators_own_shape() -> None:
    """Same group, version, names, scope, subresource and fields as Koordinator's CRD, so either may be installed
    first and the other finds the objects it expects. Ours only adds value checks (the operator names, bounds);
    the one type it narrows is patch, an object in both programs' reading."""
    ((_, crd),) = _shipped_crds()
    assert (crd["spec"]["group"], crd["spec"]["scope"]) == ("config.koordinator.sh", "Cluster")
    assert crd["spec"]["names"] == {"kind": "ClusterColocationProfile", "listKind": "ClusterColocationProfileList",
                                    "plural": "clustercolocationprofiles", "singular": "clustercolocationprofile"}
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"], version["subresources"]) == \
        ("v1alpha1", True, True, {"status": {}})
    spec = _shape(version["schema"]["openAPIV3Schema"]["properties"]["spec"])["properties"]
    assert set(spec) == set(KOORDINATOR_SPEC)
    for selector in ("namespaceSelector", "selector"):   # ours names the operators Koordinator's webhook parses
        operator = spec[selector]["properties"]["matchExpressions"]["items"]["properties"]["operator"]
        assert operator.pop("enum") == ["In", "NotIn", "Exists", "DoesNotExist"]
    ours_narrower = {"patch": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    for field, theirs in KOORDINATOR_SPEC.items():
        assert spec[field] == ours_narrower.get(field, theirs), field
