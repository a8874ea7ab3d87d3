"""Unknown fields in the objects the cluster state reads, reported as kubectl's strict field validation does.

A misspelled field must be an error, not a default: a ClusterColocationProfile with ``selecter:`` would
otherwise match every pod. The apiserver answers such an object with
``strict decoding error: unknown field "spec.selecter"``; we report the same path text.

Built-in kinds are checked against the official ``kubernetes`` client's models (``openapi_types`` and
``attribute_map`` give every field, recursively), so no built-in schema is written by hand here. The
ClusterColocationProfile is a CRD the client does not know: its fields are a pydantic model of Koordinator's
``config.koordinator.sh/v1alpha1`` type, whose built-in parts (ObjectMeta, LabelSelector) are again the client's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from webhook.cluster.state import KINDS

Path = tuple[str | int, ...]

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")


# A client type text, parsed once: ("list", item type), ("dict", value type), ("model", {field: type}) or None
# for a scalar or free-form ``object`` (IntOrString, RawExtension), whose contents are not looked into.
_Schema = tuple[str, Any] | None


@cache
def _schema(type_text: str) -> _Schema:
    if m := _LIST.match(type_text):
        return ("list", m.group(1))
    if m := _DICT.match(type_text):
        return ("dict", m.group(1))
    import kubernetes.client as k8s_models  # slow to import: only once a state is checked, not when a command starts

    model = getattr(k8s_models, type_text, None)
    types, names = getattr(model, "openapi_types", None), getattr(model, "attribute_map", None)
    if isinstance(types, dict) and isinstance(names, dict):
        return ("model", {names[attr]: t for attr, t in types.items()})
    return None


def prepare(kinds: Iterable[str]) -> None:
    """Look up, ahead of a load, every client type objects of these kinds may hold. The client imports a model's
    module on first use: in the middle of a load, those classes and their code would land among the parser's
    garbage and, living on, keep the memory around them resident (bench/state_memory.py --source files)."""
    todo = ["V1LabelSelector", *(_type_of(k) for k in kinds if k in KINDS and k not in CUSTOM_KINDS)]
    if any(k in CUSTOM_KINDS for k in kinds):
        todo.append("V1ObjectMeta")
    seen: set[str] = set()
    while todo:
        type_text = todo.pop()
        if type_text in seen:
            continue
        seen.add(type_text)
        schema = _schema(type_text)
        if schema is not None:
            todo.extend([schema[1]] if schema[0] in ("list", "dict") else schema[1].values())


def _type_of(kind: str) -> str:
    """The client's model of a built-in kind: ``V1Namespace``."""
    return KINDS[kind].version.capitalize() + kind


def _walk(value: Any, type_text: str, path: Path) -> Iterator[Path]:
    """Paths of the fields in ``value`` that the client's type does not have."""
    schema = _schema(type_text)
    if schema is None:
        return
    shape, inner = schema
    if shape == "list":
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _walk(item, inner, (*path, i))
    elif shape == "dict":
        if isinstance(value, dict):
            for key, item in value.items():
                yield from _walk(item, inner, (*path, key))
    elif isinstance(value, dict):  # a wrong type (a list for an object, ...) is for others to report
        for key, item in value.items():
            known = inner.get(key) if isinstance(key, str) else None
            if known is None:
                yield (*path, key)
            else:
                yield from _walk(item, known, (*path, key))


def format_path(path: Path) -> str:
    """``spec.containers[0].nmae``, as the apiserver writes a strict-decoding path."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


# -- ClusterColocationProfile (Koordinator apis/config/v1alpha1) -------------------------------------------
def _builtin(type_text: str) -> AfterValidator:
    """A field of a built-in type inside the CRD: checked against the client's model, not re-declared."""

    def check(value: Any) -> Any:
        unknown = list(_walk(value, type_text, ()))
        if unknown:
            raise PydanticCustomError("unknown_fields", "unknown fields", {"paths": unknown})
        return value

    return AfterValidator(check)


class _CRDModel(BaseModel):
    # Only the field names matter here; values are checked where they are used (webhook/core/profiles.py).
    model_config = ConfigDict(extra="forbid")


class ColocationProfileSpec(_CRDModel):
    namespaceSelector: Annotated[Any, _builtin("V1LabelSelector")] = None
    selector: Annotated[Any, _builtin("V1LabelSelector")] = None
    probability: Any = None            # IntOrString
    qosClass: Any = None
    priorityClassName: Any = None
    koordinatorPriority: Any = None
    labels: Any = None
    annotations: Any = None
    labelKeysMapping: Any = None
    annotationKeysMapping: Any = None
    labelSuffixes: Any = None
    schedulerName: Any = None
    patch: Any = None                  # RawExtension, schemaless: a strategic merge patch of the pod


class ColocationProfileStatus(_CRDModel):
    """Empty upstream."""


class ClusterColocationProfile(_CRDModel):
    apiVersion: Any = None
    kind: Any = None
    metadata: Annotated[Any, _builtin("V1ObjectMeta")] = None
    spec: ColocationProfileSpec | None = None
    status: ColocationProfileStatus | None = None


CUSTOM_KINDS: dict[str, type[BaseModel]] = {"ClusterColocationProfile": ClusterColocationProfile}
"""Kinds served by a CRD: the apiserver may keep unknown fields in them, so the live source checks these too."""


def _custom_unknown(model: type[BaseModel], obj: Mapping[str, Any]) -> list[Path]:
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        out: list[Path] = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            if err["type"] == "extra_forbidden":
                out.append(loc)
            elif err["type"] == "unknown_fields":
                # the paths of a built-in part, below the field that holds it
                out.extend((*loc, *p) for p in err["ctx"]["paths"])
            # other errors (spec is not an object, ...) are not about unknown fields: reported where used
        return out
    return []


def _document_order(obj: Mapping[str, Any], path: Path) -> tuple[int, ...]:
    """Where ``path`` is in ``obj``: the index of each key or item on the way (YAML keeps key order)."""
    out: list[int] = []
    node: Any = obj
    for part in path:
        if isinstance(node, dict):
            keys = list(node)
            out.append(keys.index(part) if part in node else len(keys))
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        else:
            out.append(0)
    return tuple(out)


def unknown_fields(obj: Mapping[str, Any]) -> list[Path]:
    """Every unknown field of ``obj`` (a kind the cluster state holds; other kinds have none), in document order."""
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        return []
    custom = CUSTOM_KINDS.get(kind)
    if custom is None:
        return list(_walk(obj, _type_of(kind), ()))
    # pydantic reports in field-declaration order; sort so the first one is the first in the file
    return sorted(_custom_unknown(custom, obj), key=lambda p: _document_order(obj, p))


# -- kinds: read, skipped, or refused -------------------------------------------------------------------------
# The kinds served under apiVersion v1 (the core group), as the apiserver's discovery lists them, and ``List``,
# kubectl's wrapper. Only used to tell a kind of the core group the state does not read (a Service: skipped)
# from a misspelt one (``Namespce``: refused); tests/cluster/test_files.py checks each against the client's models.
CORE_KINDS = ("Binding", "ComponentStatus", "ConfigMap", "Endpoints", "Event", "LimitRange", "List", "Namespace",
              "Node", "PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate", "ReplicationController",
              "ResourceQuota", "Secret", "Service", "ServiceAccount")
# Files that are no API object though they look like one under apiVersion v1: a kubeconfig. (Other tools'
# configuration files carry a group of their own: kustomize.config.k8s.io, apiserver.config.k8s.io, ...)
_CORE_FILES = ("Config",)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def kind_verdict(obj: Mapping[str, Any], read: Iterable[str]) -> bool:
    """Whether a source reads ``obj`` (of a kind in ``read``, at that kind's apiVersion or none), or skips it (a kind
    it does not read, another tool's file); ValueError, with kubectl's ``no matches for kind`` text, for what can
    only be a mistake about a kind it reads: a read kind at another apiVersion (``koordinator.sh/v1alpha1``), a
    kind its group does not have (``ClusterColocationProfil`` in ``config.koordinator.sh/v1alpha1``), or, with no
    apiVersion to tell, a near miss of a read kind's name."""
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if not isinstance(kind, str):
        raise ValueError("manifest has no kind")
    read = tuple(read)
    if kind in read:
        expected = KINDS[kind].api_version
        if api_version is None or api_version == expected:
            return True
        raise ValueError(f'no matches for kind "{kind}" in version "{api_version}"; the cluster state reads '
                         f"{kind} as {expected}")
    if api_version is None:
        near = _near(kind, read)
        if near is not None:
            raise ValueError(f'no matches for kind "{kind}"; did you mean {near}?')
        return False
    group = _group(str(api_version))
    if kind in KINDS or group not in {k.group for k in KINDS.values()}:
        return False  # a kind the state holds but this reader does not use, or another group's
    known = ((*CORE_KINDS, *_CORE_FILES) if group == "" else
             tuple(k.kind for k in KINDS.values() if k.group == group))
    if kind in known or kind.removesuffix("List") in known:
        return False
    near = _near(kind, known)
    raise ValueError(f'no matches for kind "{kind}" in version "{api_version}"'
                     + (f"; did you mean {near}?" if near else ""))


def _near(kind: str, kinds: Iterable[str]) -> str | None:
    """The kind ``kind`` is most likely a misspelling of (case aside, or a letter or two off), or None."""
    kinds = tuple(kinds)
    same = [k for k in kinds if k.lower() == kind.lower()]
    close = same or difflib.get_close_matches(kind, kinds, n=1, cutoff=0.8)
    return close[0] if close else None


# Where a workload holds the pod template it makes pods of (apps/v1, batch/v1, core/v1), for ``audit -f``.
TEMPLATE_PATHS: dict[str, Path] = {
    "Deployment": ("spec", "template"), "StatefulSet": ("spec", "template"), "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"), "ReplicationController": ("spec", "template"), "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"), "PodTemplate": ("template",),
}


def pod_unknown_fields(obj: Mapping[str, Any]) -> list[Path]:
    """The unknown fields of a Pod a user wrote, or of a workload's pod template (the rest of a workload is not
    this project's to judge), as the apiserver's strict decoding names them, in document order."""
    kind = obj.get("kind")
    if kind == "Pod":
        # What a create of it keeps: its status (dropped on create) and managedFields (the apiserver's own) are
        # what `kubectl get -o json` carries and no user writes, and walking them was most of the cost (audit -f
        # of such output, docs/audit.md "Speed and memory").
        meta = obj.get("metadata")
        kept = {k: v for k, v in obj.items() if k != "status"}
        if isinstance(meta, dict) and "managedFields" in meta:
            kept["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        return list(_walk(kept, "V1Pod", ()))
    where = TEMPLATE_PATHS.get(kind) if isinstance(kind, str) else None
    if where is None:
        return []
    value: Any = obj
    for part in where:
        value = value.get(part) if isinstance(value, dict) else None
    return list(_walk(value, "V1PodTemplateSpec", where))


def strict_decoding(kind: str, unknown: list[Path], duplicates: Iterable[str] = ()) -> str:
    """kubectl's words for an object the apiserver's strict decoding refuses: ``Pod in version "v1" cannot be
    handled as a Pod: strict decoding error: ...`` (``duplicate field "..."`` as ``sigs.k8s.io/json`` names one)."""
    errors = [*(f'duplicate field "{d}"' for d in duplicates), *([describe_unknown(unknown)] if unknown else [])]
    return f'{kind} in version "v1" cannot be handled as a {kind}: strict decoding error: {", ".join(errors)}'


def describe_unknown(paths: list[Path]) -> str:
    """The apiserver's text: ``unknown field "spec.selecter"``, several joined with ", "."""
    return ", ".join(f'unknown field "{format_path(p)}"' for p in paths)


def check(obj: Mapping[str, Any]) -> str | None:
    """``unknown field "..."`` for an object with unknown fields, else None."""
    paths = unknown_fields(obj)
    return describe_unknown(paths) if paths else None
