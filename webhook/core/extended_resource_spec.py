"""The ``node.koordinator.sh/extended-resource-spec`` annotation (Koordinator's
``pkg/webhook/pod/mutating/extended_resource_spec.go``, ``apis/extension/resource.go``): the batch resources of each
container of a pod, written by the webhook after the batch conversion and read by the node agent, which enforces
them in the pod's cgroups.
"""

from __future__ import annotations

from typing import Any

import orjson

from webhook.core.quantity import QuantityError, canonical, parse_quantity
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY

EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
SPEC_RESOURCES = (BATCH_CPU, BATCH_MEMORY)  # what the annotation carries (Koordinator: batch only)


def extended_resource_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``{"containers": {name: {"limits": {...}, "requests": {...}}}}`` with the batch resources of the
    regular containers (not init containers, not overhead), in canonical quantity form."""
    containers: dict[str, Any] = {}
    for c in spec.get("containers") or []:
        if not isinstance(c, dict) or not isinstance(c.get("resources"), dict):
            continue
        entry: dict[str, Any] = {}
        for kind in ("limits", "requests"):
            values = c["resources"].get(kind)
            if not isinstance(values, dict):
                continue
            picked = {}
            for name in SPEC_RESOURCES:
                if name in values:
                    try:
                        picked[name] = canonical(values[name])
                    except (QuantityError, TypeError):
                        continue
            if picked:
                entry[kind] = picked
        if entry:
            containers[str(c.get("name", ""))] = entry
    return {"containers": containers} if containers else {}


def encode_extended_resource_spec(value: dict[str, Any]) -> str:
    """JSON as Go's encoding/json writes it (map keys sorted, no spaces)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def same_extended_resource_spec(text: Any, wanted: dict[str, Any]) -> bool:
    """Whether the annotation ``text`` (None: absent) already says ``wanted``, comparing quantities
    by value as Koordinator compares the parsed specs."""
    if text is None:  # absent: the same only when nothing is wanted (an empty spec parses back as {})
        return not wanted
    current = parse_extended_resource_spec(text)
    return current is not None and current == parse_extended_resource_spec(encode_extended_resource_spec(wanted))


def parse_extended_resource_spec(text: Any) -> dict[str, Any] | None:
    """The annotation's value with quantities parsed (Decimal), or None when it is not valid."""
    if not isinstance(text, str):
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    containers = data.get("containers") or {}
    if not isinstance(containers, dict):
        return None
    out: dict[str, Any] = {}
    for name, entry in containers.items():
        if not isinstance(entry, dict):
            return None
        norm: dict[str, Any] = {}
        for kind in ("limits", "requests"):
            values = entry.get(kind)
            if not values:
                continue
            if not isinstance(values, dict):
                return None
            try:
                norm[kind] = {k: parse_quantity(v) for k, v in values.items()}
            except (QuantityError, TypeError):
                return None
        if norm:
            out[name] = norm
    return {"containers": out} if out else {}
