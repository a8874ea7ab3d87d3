"""Strategic merge patch over a Pod (the apimachinery ``strategicpatch`` rules the Pod schema uses).

Hand-written: no maintained Python package implements Kubernetes strategic merge. Covered:
maps merge recursively, ``null`` deletes a key, lists the Pod schema declares ``merge`` are merged by
their merge key (``containers`` by ``name``, ``volumeMounts`` by ``mountPath``, ...), the only
primitive merge list (``metadata.finalizers``) is a set union, every other list is replaced, and the
directives ``$patch: replace`` / ``$patch: delete`` on maps and merge-list items. ``$setElementOrder``
and ``$retainKeys`` are accepted and ignored (they only order or prune what the patch already says).

Pure: the input is never modified; untouched subtrees of the result are the input's own objects
(copy on write), patch values are copied so the caller may mutate the result freely.
"""

from __future__ import annotations

from typing import Any

_CONTAINER_LISTS = {"env": "name", "ports": "containerPort", "volumeMounts": "mountPath",
                    "volumeDevices": "devicePath", "resizePolicy": "resourceName"}

# Field path (list indices left out) -> merge key, from the Pod types' patchMergeKey tags.
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "resourceClaims"): "name",
    ("spec", "schedulingGates"): "name",
}
for _field in ("containers", "initContainers", "ephemeralContainers"):
    MERGE_KEYS[("spec", _field)] = "name"
    for _sub, _key in _CONTAINER_LISTS.items():
        MERGE_KEYS[("spec", _field, _sub)] = _key
PRIMITIVE_MERGE_LISTS = frozenset({("metadata", "finalizers")})

_DIRECTIVE = "$patch"


class StrategicMergeError(ValueError):
    """A patch that cannot be applied; the message names the field."""


def clone(value: Any) -> Any:
    """Deep copy of JSON data (patch values must not be shared with the caller's object)."""
    # Leaves are copied inline, not through a call each: this runs for every patch op.
    if isinstance(value, dict):
        return {k: clone(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def _strip(value: Any) -> Any:
    """A patch value inserted where nothing exists: drop nulls and directives, copy the rest."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()
                if v is not None and not (isinstance(k, str) and k.startswith("$"))}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path) or "<root>"


def merge(original: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """``original`` with ``patch`` applied strategically (see the module docstring)."""
    if not isinstance(patch, dict):
        return clone(patch)
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != _DIRECTIVE})
    if directive not in (None, "merge"):
        raise StrategicMergeError(f"{_where(path)}: unsupported $patch directive {directive!r} on a map")
    if not isinstance(original, dict):
        return _strip(patch)
    result = dict(original)
    for key, value in patch.items():
        if not isinstance(key, str):
            raise StrategicMergeError(f"{_where(path)}: keys must be strings, got {key!r}")
        if key.startswith("$"):
            continue  # $patch handled above; $setElementOrder/..., $retainKeys carry no new values
        sub = (*path, key)
        if value is None or (isinstance(value, dict) and value.get(_DIRECTIVE) == "delete"):
            result.pop(key, None)
        elif isinstance(value, list) and sub in MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, sub, MERGE_KEYS[sub])
        elif isinstance(value, list) and sub in PRIMITIVE_MERGE_LISTS:
            current = result.get(key)
            current = current if isinstance(current, list) else []
            result[key] = [*current, *(clone(v) for v in value if v not in current)]
        else:
            result[key] = merge(result.get(key), value, sub)
    return result


def _merge_list(original: Any, patch: list[Any], path: tuple[str, ...], key: str) -> list[Any]:
    items = list(original) if isinstance(original, list) else []
    if any(isinstance(p, dict) and p.get(_DIRECTIVE) == "replace" for p in patch):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and p.get(_DIRECTIVE) == "replace")]
    for i, p in enumerate(patch):
        if not isinstance(p, dict) or key not in p:
            raise StrategicMergeError(f"{_where(path)}[{i}]: does not contain declared merge key: {key}")
        pos = next((j for j, item in enumerate(items) if isinstance(item, dict) and item.get(key) == p[key]), None)
        if p.get(_DIRECTIVE) == "delete":
            if pos is not None:
                del items[pos]
        elif pos is None:
            items.append(_strip(p))
        else:
            items[pos] = merge(items[pos], p, path)
    return items
