"""cpu/memory -> batch/mid extended resources, and the extended-resource-spec annotation.

Koordinator's ``mutatePodResourceSpec`` and ``extended_resource_spec.go`` (koordinator.md §2.5, §2.6):
a koord-batch pod asks for ``kubernetes.io/batch-cpu`` (whole milli-cores) and
``kubernetes.io/batch-memory`` (whole bytes) instead of cpu and memory, a koord-mid pod for the mid
resources; the native keys go. The node agent reuses ``to_milli_cores``/``to_bytes``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson

from webhook.core.priority import KOORD_BATCH, KOORD_MID, band_of
from webhook.core.quantity import (
    QuantityError,
    cacheable,
    format_binary_si,
    format_decimal_si,
    int_value,
    milli_value,
    parse_quantity,
)
from webhook.core.resources import (
    BATCH_CPU,
    BATCH_MEMORY,
    CPU,
    MEMORY,
    MID_CPU,
    MID_MEMORY,
    asks,
    iter_containers,
    resource_lists,
    shown,
)
from webhook.core.strategic_merge import clone

EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
TARGETS: dict[str, tuple[str, str]] = {KOORD_BATCH: (BATCH_CPU, BATCH_MEMORY), KOORD_MID: (MID_CPU, MID_MEMORY)}
_SPEC_RESOURCES = (BATCH_CPU, BATCH_MEMORY)  # what the annotation carries (Koordinator: batch only)
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def targets_for(priority: Any) -> tuple[str, str] | None:
    """(cpu name, memory name) for a priority in the koord-batch or koord-mid band, else None."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        return None
    return TARGETS.get(band_of(priority))


def to_milli_cores(q: Decimal) -> int:
    """Whole milli-cores, rounded up as upstream's MilliValue: 500m -> 500, 1 -> 1000, 1.5 -> 1500."""
    return milli_value(q)


def to_bytes(q: Decimal) -> int:
    """Whole bytes, rounded up: 512Mi -> 536870912."""
    return int_value(q)


# Verdict caches, one per conversion: plain dicts read with .get, the cheapest hit there is. Only
# short texts go in (quantity.cacheable: no huge hostile strings), so only str keys exist and a
# number never hits its text (1, 1.0 and True would share a key with each other, never with "1").
_CACHE_SIZE = 4096
_MILLI_CORES: dict[str, str] = {}
_BYTES: dict[str, str] = {}
_CANONICAL: dict[str, str] = {}


def _cached(cache: dict[str, str], compute: Any, raw: Any) -> str:
    """``compute(raw)`` through ``cache``; QuantityError, or TypeError for an unhashable ``raw``."""
    text = cache.get(raw)
    if text is None:
        text = compute(raw)
        if cacheable(raw):
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[raw] = text
    return text


def _milli_cores_text(raw: Any) -> str:
    """The whole milli-cores of a raw cpu quantity, as a string (QuantityError)."""
    return str(to_milli_cores(parse_quantity(raw)))


def _bytes_text(raw: Any) -> str:
    """The whole bytes of a raw memory quantity, as a string (QuantityError)."""
    return str(to_bytes(parse_quantity(raw)))


def _canonical(raw: Any) -> str:
    q = parse_quantity(raw)
    if isinstance(raw, str) and raw[-2:] in _BINARY_SUFFIXES and q == q.to_integral_value():
        return format_binary_si(int(q))
    return format_decimal_si(q)


def canonical(raw: Any) -> str:
    """A quantity as Go prints it after parsing: "1000" -> "1k", "1024Mi" -> "1Gi" (a binary suffix
    keeps the binary form, whole values only, which is all Kubernetes stores); QuantityError."""
    try:
        return _cached(_CANONICAL, _canonical, raw)
    except TypeError:  # unhashable (a list or map): no cache, and the QuantityError it deserves
        return _canonical(raw)


def convert_list(values: dict[str, Any], cpu_name: str, mem_name: str,
                 prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """A ResourceList with cpu/memory renamed and re-expressed; also the native keys converted
    (each as ``prefix`` + name).

    The converted key takes the native key's place (an existing extended value is overwritten,
    as Koordinator does; ``convert_pod`` does not convert a list that asks for one). An unparsable
    quantity is left alone (the rules deny such a pod before converting: ``resources.quantity_errors``).
    The result shares no map or list with ``values`` (a malformed value is copied), so a patch op
    may hold it as it is.
    """
    out: dict[str, Any] = {}
    done: list[str] = []
    for name, raw in values.items():
        if name == CPU or name == MEMORY:
            try:  # _cached inlined: this runs for every quantity of every container
                cache = _MILLI_CORES if name == CPU else _BYTES
                text = cache.get(raw)
                if text is None:
                    text = _cached(cache, _milli_cores_text if name == CPU else _bytes_text, raw)
            except (QuantityError, TypeError):  # TypeError: an unhashable (list/map) value
                out[name] = clone(raw)
                continue
            out[cpu_name if name == CPU else mem_name] = text
            done.append(prefix + name)
        elif name not in out:
            out[name] = clone(raw) if isinstance(raw, (dict, list)) else raw
    return out, done


# Whole-container results, keyed by the JSON text of (requests, limits): a pod's containers, and the
# pods of one workload, repeat a few resource shapes, and a hit skips every per-quantity step.
# Entries are made for all-text lists only, and a JSON string can only come from a text value (JSON
# keeps 1, 1.0, true, null and "1" apart; datetimes and str subclasses, which orjson would also write
# as strings, are refused), so a hit means the same texts. The key's length is bounded (no huge
# hostile texts held).
_RESOURCES: dict[tuple[bytes, str, str], tuple[tuple[tuple[str, dict[str, str]], ...], tuple[str, ...]]] = {}
_RESOURCES_KEY_LIMIT = 512
_KEY_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def convert_resources(resources: dict[str, Any], cpu_name: str, mem_name: str) -> tuple[dict[str, Any], list[str]]:
    """A container's ``resources`` converted; a limit without a request gets the request = limit."""
    requests, limits = resources.get("requests"), resources.get("limits")
    try:
        text = orjson.dumps([requests, limits], option=_KEY_OPTIONS)
    except TypeError:  # not JSON data (an integer beyond 64 bits, deep nesting, a datetime): no entry
        return _convert_resources(resources, cpu_name, mem_name)
    key = (text, cpu_name, mem_name)
    hit = _RESOURCES.get(key)
    if hit is not None:
        lists, done = hit
        out = dict(resources)
        for kind, values in lists:
            out[kind] = dict(values)  # fresh maps: callers hand them on (patch ops)
        return out, list(done)
    out, converted = _convert_resources(resources, cpu_name, mem_name)
    if len(text) <= _RESOURCES_KEY_LIMIT and _all_text(requests) and _all_text(limits):
        if len(_RESOURCES) >= _CACHE_SIZE:
            _RESOURCES.clear()
        # The lists the conversion made (a list that is not a map stays as it was, in ``out`` too).
        lists = tuple((kind, dict(out[kind])) for kind in ("requests", "limits")
                      if kind in out and out[kind] is not resources.get(kind))
        _RESOURCES[key] = (lists, tuple(converted))
    return out, converted


def _all_text(values: Any) -> bool:
    """A ResourceList of texts only (or none at all)."""
    return values is None or isinstance(values, dict) and all(type(v) is str for v in values.values())


def _convert_resources(resources: dict[str, Any], cpu_name: str, mem_name: str) -> tuple[dict[str, Any], list[str]]:
    out = dict(resources)
    done: list[str] = []
    for kind, prefix in (("requests", "requests."), ("limits", "limits.")):
        values = resources.get(kind)
        if isinstance(values, dict):
            out[kind], converted = convert_list(values, cpu_name, mem_name, prefix)
            done += converted
    limits = out.get("limits")
    if isinstance(limits, dict):
        requests = out.get("requests")
        if not isinstance(requests, dict):
            requests = None
        for name in (cpu_name, mem_name):
            if name in limits and not (requests is not None and name in requests):
                requests = out["requests"] = {**(requests or {}), name: limits[name]}
                done.append(f"requests.{name} = limit")
    return out, done


Path = tuple[str | int, ...]


def convert_pod(spec: dict[str, Any], cpu_name: str,
                mem_name: str) -> tuple[list[tuple[Path, Any, list[str]]], list[tuple[Path, str, Any]]]:
    """(changes, skipped). A change is (path under the pod, new value, what changed) for every
    container resources and the overhead that change. A container (or the overhead) is not converted
    at all when a conversion would write over a value it already asks for with another one (its
    ``batch-cpu: 500`` next to ``cpu: 2``): the user's value would be lost, and the validating
    no-mixing rule reports the mix instead. skipped lists (path, that name, its value)."""
    changes: list[tuple[Path, Any, list[str]]] = []
    skipped: list[tuple[Path, str, Any]] = []
    for field, i, c in iter_containers(spec):
        resources = c.get("resources")
        if not isinstance(resources, dict):
            continue
        path: Path = ("spec", field, i, "resources")
        clash = None
        for kind in ("requests", "limits"):
            values = resources.get(kind)
            if clash is None and isinstance(values, dict):
                clash = _clash(values, cpu_name, mem_name)
        if clash is not None:
            skipped.append((path, *clash))
            continue
        new, done = convert_resources(resources, cpu_name, mem_name)
        if done:
            changes.append((path, new, done))
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        clash = _clash(overhead, cpu_name, mem_name)
        if clash is not None:
            skipped.append((("spec", "overhead"), *clash))
        else:
            new, done = convert_list(overhead, cpu_name, mem_name, "overhead.")
            if done:
                changes.append((("spec", "overhead"), new, done))
    return changes, skipped


def _clash(values: dict[str, Any], cpu_name: str, mem_name: str) -> tuple[str, Any] | None:
    """(name, value) of an extended value in ``values`` that converting its native key would replace
    with a different one, else None. An extended value of 0 asks for nothing, so it may go; the same
    value (our own earlier output, a profile's patch written again on reinvocation) is no loss."""
    for native, target, convert in ((CPU, cpu_name, to_milli_cores), (MEMORY, mem_name, to_bytes)):
        if native not in values or target not in values or not asks(values[target]):
            continue
        try:
            same = parse_quantity(values[target]) == convert(parse_quantity(values[native]))
        except QuantityError:  # denied before any conversion (resources.quantity_errors)
            same = False
        if not same:
            return target, values[target]
    return None


def cpu_notes(spec: dict[str, Any], converted: set[tuple[str, int]], cpu_name: str) -> list[str]:
    """What a conversion makes of a cpu that reads oddly, for the owners in ``converted`` ((field,
    index) of a ``resources.resource_lists`` entry): a memory unit (``100Mi`` is 104857600 cores) or a
    fraction of a milli-core (``0.5m``, rounded up to 1 as the kubelet does)."""
    notes: list[str] = []
    short = cpu_name.rsplit("/", 1)[-1]
    for owner, field, index, kind, values in resource_lists(spec):
        if (field, index) not in converted or CPU not in values:
            continue
        raw = values[CPU]
        try:
            q = parse_quantity(raw)
        except QuantityError:
            continue
        milli = to_milli_cores(q)
        where = f"{owner}: {'cpu' if field == 'overhead' else kind + '.cpu'}"
        if isinstance(raw, str) and raw[-2:] in _BINARY_SUFFIXES:
            notes.append(f'{where} "{raw}" is in memory units: {short} {milli} ({format_decimal_si(q)} cores)')
        elif milli != q * 1000:
            notes.append(f'{where} "{shown(raw)}" is not whole milli-cores: {short} {milli} (rounded up)')
    return notes


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
            for name in _SPEC_RESOURCES:
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
