"""cpu/memory -> batch/mid extended resources (Koordinator's ``mutatePodResourceSpec``,
``pkg/webhook/pod/mutating/cluster_colocation_profile.go``).

A koord-batch pod asks for ``kubernetes.io/batch-cpu`` (whole milli-cores) and ``kubernetes.io/batch-memory``
(whole bytes) instead of cpu and memory, a koord-mid pod for the mid resources; the native keys go. The
annotation that records the result for the node is ``core.extended_resource_spec``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from webhook.admission.domain.strategic_merge import clone
from webhook.core.memo import memo
from webhook.core.priority import KOORD_BATCH, KOORD_MID, band_of
from webhook.core.quantity import (
    BINARY_SUFFIXES,
    QuantityError,
    format_decimal_si,
    int_value,
    is_whole,
    is_whole_milli,
    milli_value,
    parse_quantity,
)
from webhook.core.resources import (
    BATCH_CPU,
    BATCH_MEMORY,
    CPU,
    HUGEPAGES_PREFIX,
    LEGACY_BATCH,
    MEMORY,
    MID_CPU,
    MID_MEMORY,
    OVERHEAD,
    RECLAIMED_CPU,
    RECLAIMED_MEMORY,
    ResourceList,
    aggregate_containers,
    asks,
    container_limits,
    container_requests,
    iter_containers,
    pod_level,
    shown,
)

TARGETS: dict[str, tuple[str, str]] = {KOORD_BATCH: (BATCH_CPU, BATCH_MEMORY), KOORD_MID: (MID_CPU, MID_MEMORY)}
# What the texts call them, in the 120 characters of a warning: batch-cpu, mid-memory.
SHORT_NAMES: dict[str, str] = {name: name.rsplit("/", 1)[-1] for pair in TARGETS.values() for name in pair}
SMALL_BATCH_CPU = 100  # below a tenth of a core: almost certainly meant as cores


def targets_for(priority: Any) -> tuple[str, str] | None:
    """(cpu name, memory name) for a priority in the koord-batch or koord-mid band, else None."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        return None
    return TARGETS.get(band_of(priority))


@memo  # every container of a workload repeats its texts (bench/memo.py)
def milli_cores_text(raw: object) -> str:
    """The whole milli-cores of a cpu quantity, rounded up as upstream's MilliValue, as text: "500m" -> "500",
    "1" -> "1000" (QuantityError)."""
    return str(milli_value(parse_quantity(raw)))


@memo
def bytes_text(raw: object) -> str:
    """The whole bytes of a memory quantity, rounded up, as text: "512Mi" -> "536870912" (QuantityError)."""
    return str(int_value(parse_quantity(raw)))


def convert_list(values: dict[str, Any], cpu_name: str, mem_name: str,
                 prefix: str = "", pages: list[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """A ResourceList with cpu/memory renamed and re-expressed; also the native keys converted
    (each as ``prefix`` + name).

    The converted key takes the native key's place (an existing extended value is overwritten,
    as Koordinator does; ``convert_pod`` does not convert a list that asks for one). An unparsable
    quantity is left alone (the rules deny such a pod before converting: ``resources.quantity_errors``).
    The result shares no map or list with ``values`` (a malformed value is copied), so a patch op
    may hold it as it is. ``pages``, when given, gets the hugepages names kept (``hugepages_alone``).
    """
    out: dict[str, Any] = {}
    done: list[str] = []
    for name, raw in values.items():
        if name in (CPU, MEMORY):
            try:
                text = milli_cores_text(raw) if name == CPU else bytes_text(raw)
            except QuantityError:
                out[name] = clone(raw)
                continue
            out[cpu_name if name == CPU else mem_name] = text
            done.append(prefix + name)
        elif name not in out:
            out[name] = clone(raw) if isinstance(raw, (dict, list)) else raw
            if pages is not None and name.startswith(HUGEPAGES_PREFIX):  # rare: only names other than cpu/memory
                pages.append(name)
    return out, done


def convert_resources(resources: dict[str, Any], cpu_name: str, mem_name: str,
                      pages: list[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """A container's ``resources`` converted; a limit without a request gets the request = limit. ``pages``: as
    ``convert_list``'s."""
    out = dict(resources)
    done: list[str] = []
    for kind, prefix in (("requests", "requests."), ("limits", "limits.")):
        values = resources.get(kind)
        if isinstance(values, dict):
            out[kind], converted = convert_list(values, cpu_name, mem_name, prefix, pages)
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

LIMIT_RANGER = "kubernetes.io/limit-ranger"
LIMIT_RANGER_PREFIX = "LimitRanger plugin set: "  # how the annotation's text starts
_SET = re.compile(r"(?P<names>[^;]+?) (?P<kind>request|limit) for (?P<owner>init container|container) (?P<name>[^;]+)")
# What LimitRanger set, by (containers or initContainers, container name): requests and limits by name.
Defaulted = dict[tuple[str, str], dict[str, frozenset[str]]]


def limit_ranger_defaults(annotations: Any) -> Defaulted:
    """What the ``kubernetes.io/limit-ranger`` annotation says LimitRanger set: its text is ``LimitRanger plugin
    set: cpu, memory request for container main; cpu limit for init container setup`` (``mergeContainerResources``
    names the keys it added, sorted, per container and kind). Anything else reads as nothing set."""
    text = annotations.get(LIMIT_RANGER) if isinstance(annotations, dict) else None
    if not isinstance(text, str) or not text.startswith(LIMIT_RANGER_PREFIX):
        return {}
    out: Defaulted = {}
    for part in text[len(LIMIT_RANGER_PREFIX):].split("; "):
        m = _SET.fullmatch(part.strip())
        if m is None:
            continue
        field = "initContainers" if m["owner"] == "init container" else "containers"
        kinds = out.setdefault((field, m["name"]), {})
        kind = "requests" if m["kind"] == "request" else "limits"
        kinds[kind] = kinds.get(kind, frozenset()) | {n.strip() for n in m["names"].split(",")}
    return out


def _without_put_back(resources: dict[str, Any], put_back: dict[str, frozenset[str]], cpu_name: str,
                      mem_name: str) -> tuple[dict[str, Any], list[str]]:
    """``resources`` without the cpu/memory LimitRanger put back next to the band resource a conversion already
    wrote for them (it runs again after a webhook's patch and adds its defaults to what no longer names them):
    converting them again would write over the converted value, keeping them would mix."""
    out, gone = resources, []
    for kind in ("requests", "limits"):
        values = resources.get(kind)
        if not isinstance(values, dict):
            continue
        drop = [n for n, target in ((CPU, cpu_name), (MEMORY, mem_name))
                if n in put_back.get(kind, ()) and n in values and target in values]
        if drop:
            out = dict(out) if out is resources else out
            out[kind] = {k: v for k, v in values.items() if k not in drop}
            gone += [f"{kind}.{n} that LimitRanger set again" for n in drop]
    return out, gone


def convert_pod(spec: dict[str, Any], cpu_name: str, mem_name: str,
                defaulted: Defaulted | None = None) -> tuple[list[tuple[Path, Any, list[str]]],
                                                             list[tuple[Path, str, Any]], list[tuple[Path, str]]]:
    """(changes, skipped, alone). A change is (path under the pod, new value, what changed) for every
    container resources that change (``spec.overhead`` is the RuntimeClass's and never converted: the
    RuntimeClass plugin refuses a pod whose overhead differs from its class's). A container is not converted
    at all when a conversion would write over a value it already asks for with another one (its
    ``batch-cpu: 500`` next to ``cpu: 2``): the user's value would be lost, and the validating
    no-mixing rule reports the mix instead, unless LimitRanger put the native value back (``defaulted``, from
    its annotation): then the native value goes. skipped lists (path, that name, its value). alone lists (path,
    hugepages name) of the converted containers that would hold hugepages without cpu or memory
    (``hugepages_text``)."""
    changes: list[tuple[Path, Any, list[str]]] = []
    skipped: list[tuple[Path, str, Any]] = []
    alone: list[tuple[Path, str]] = []
    pages: list[str] = []
    for field, i, c in iter_containers(spec):
        resources = c.get("resources")
        if not isinstance(resources, dict):
            continue
        path: Path = ("spec", field, i, "resources")
        put_back = defaulted.get((field, str(c.get("name") or ""))) if defaulted else None
        gone: list[str] = []
        if put_back:
            resources, gone = _without_put_back(resources, put_back, cpu_name, mem_name)
        clash = None
        for kind in ("requests", "limits"):
            values = resources.get(kind)
            if clash is None and isinstance(values, dict):
                clash = _clash(values, cpu_name, mem_name)
        if clash is not None:
            skipped.append((path, *clash))
            continue
        seen = len(pages)
        new, done = convert_resources(resources, cpu_name, mem_name, pages)
        if done or gone:
            changes.append((path, new, gone + done))
            if len(pages) > seen and done:   # cpu/memory converted away, hugepages kept
                alone.append((path, pages[seen]))
    return changes, skipped, alone


# -- pod-level resources (spec.resources) -----------------------------------------------------------------------
# The apiserver takes only cpu, memory and hugepages-* at pod level, so a band pod cannot hold batch-cpu there,
# and pod-level cpu/memory would make the kubelet run it Guaranteed or Burstable, outside the BE tier.

PodLevelFold = tuple[dict[str, Any], dict[str, Any] | None, list[str]]


def fold_pod_level(spec: dict[str, Any], cpu_name: str, mem_name: str) -> PodLevelFold | str | None:
    """What becomes of the pod-level cpu/memory (``spec.resources``) of a pod converted to ``cpu_name``/``mem_name``:
    None when there are none; else (the spec to convert, with the values moved into its only container,
    ``spec.resources`` without cpu/memory or None when nothing is left of it, what was done); else, when no exact
    way exists, the denial text naming the field and what to write instead.

    Exact means the pod is scheduled and capped as before, per resource:
    - a pod-level value can go when the containers already say the same: the request equals the containers'
      aggregate request (what the apiserver's defaulting writes from pod-level limits), and the limit is no
      lower than the containers' aggregate limit with every container (init containers too) stating its own;
    - otherwise, with one container and no init containers, the values move into that container: its request
      becomes the pod-level request (what the scheduler charged), its own limit stays or the pod-level limit
      becomes it (the apiserver refuses a container limit above the pod's).
    """
    level = spec.get("resources")
    if not isinstance(level, dict):
        return None
    natives = [(kind, name) for kind in ("requests", "limits") for name in (CPU, MEMORY)
               if isinstance(level.get(kind), dict) and name in level[kind]]
    if not natives:
        return None
    parsed = pod_level(spec)
    requests, limits = parsed if parsed is not None else ({}, {})
    agg_requests = aggregate_containers(spec, container_requests)
    agg_limits = aggregate_containers(spec, container_limits)
    everyone = [c for _, _, c in iter_containers(spec)]
    alone = len(everyone) == 1 and not spec.get("initContainers")
    moved: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    done: list[str] = []
    for name in (CPU, MEMORY):
        request, limit = requests.get(name), limits.get(name)
        if request is None and limit is None:
            continue
        request_goes = request is None or request == agg_requests.get(name, 0)
        limit_goes = limit is None or (agg_limits.get(name, 0) <= limit and all(
            container_limits(c).get(name, 0) > 0 for c in everyone))
        if request_goes and limit_goes:
            done.append(f"spec.resources {name} dropped (the containers state it)")
            continue
        if alone:
            own_limit = container_limits(everyone[0]).get(name)
            new_limit = own_limit if own_limit is not None and (limit is None or own_limit <= limit) else limit
            if request is None or new_limit is None or request <= new_limit:
                if request is not None:
                    moved["requests"][name] = format_decimal_si(request)
                if new_limit is not None and new_limit != own_limit:
                    moved["limits"][name] = format_decimal_si(new_limit)
                done.append(f"spec.resources {name} moved into the container")
                continue
        kind = "requests" if not request_goes else "limits"
        if kind == "requests" and name not in (level.get("requests") or {}):
            kind = "limits"   # the request is the apiserver's default from the limit: name what the user wrote
        value = request if kind == "requests" else limit
        raw = (level.get(kind) or {}).get(name, format_decimal_si(value or Decimal(0)))
        why = f"{len(everyone)} containers share it" if not alone else "it is above the container's own limit"
        return (f'spec.resources.{kind}[{name}]: "{shown(raw)}" cannot be converted exactly ({why}), and the '
                f"apiserver takes no {cpu_name if name == CPU else mem_name} at pod level (native cpu/memory there "
                "would make the kubelet run the pod as Guaranteed or Burstable, outside its QoS tier): remove cpu "
                f"and memory from spec.resources and write {cpu_name} and {mem_name} in each container's "
                "resources.requests and resources.limits instead")
    new_spec = spec
    if moved["requests"] or moved["limits"]:
        c = dict(everyone[0])
        res = dict(c.get("resources") or {}) if isinstance(c.get("resources"), dict) else {}
        for kind, values in moved.items():
            if values:
                old = res.get(kind)
                res[kind] = {**(old if isinstance(old, dict) else {}), **values}
        c["resources"] = res
        new_spec = {**spec, "containers": [c]}
    rest: dict[str, Any] = {}
    for kind, values in level.items():
        if kind in ("requests", "limits") and isinstance(values, dict):
            kept = {k: v for k, v in values.items() if k not in (CPU, MEMORY)}
            if kept:
                rest[kind] = kept
        else:
            rest[kind] = values
    return new_spec, (rest or None), done


def _clash(values: dict[str, Any], cpu_name: str, mem_name: str) -> tuple[str, Any] | None:
    """(name, value) of an extended value in ``values`` that converting its native key would replace
    with a different one, else None. An extended value of 0 asks for nothing, so it may go; the same
    value (our own earlier output, a profile's patch written again on reinvocation) is no loss. A legacy
    ``alibabacloud.com/reclaimed-*`` value next to a native one is the same resource by its old name: the
    container is left as written, and the validating chain names both."""
    if (cpu_name not in values and mem_name not in values and RECLAIMED_CPU not in values
            and RECLAIMED_MEMORY not in values):
        return None  # nothing a conversion could write over: the usual list, four lookups
    for legacy, batch_name in LEGACY_BATCH.items():
        if batch_name in (cpu_name, mem_name) and legacy in values and asks(values[legacy]):
            native = CPU if batch_name == BATCH_CPU else MEMORY
            if native in values:
                return legacy, values[legacy]
    for native, target, convert in ((CPU, cpu_name, milli_value), (MEMORY, mem_name, int_value)):
        if native not in values or target not in values or not asks(values[target]):
            continue
        try:
            same = parse_quantity(values[target]) == convert(parse_quantity(values[native]))
        except QuantityError:  # denied before any conversion (resources.quantity_errors)
            same = False
        if not same:
            return target, values[target]
    return None


@memo
def _odd_cpu(raw: object) -> str | None:
    """How a cpu quantity converts oddly, or None when plainly (or when it is no quantity): written in memory
    units (``100Mi`` is 104857600 milli-cores), or a fraction of a milli-core (``0.5m``, rounded up to 1 as the
    kubelet does). The text goes after the converted value."""
    try:
        q = parse_quantity(raw)
    except QuantityError:
        return None
    if isinstance(raw, str) and raw[-2:] in BINARY_SUFFIXES:
        return f"({format_decimal_si(q)} cores)"
    return None if is_whole_milli(q) else "(rounded up)"


@memo
def _memory_rounds(raw: object) -> bool:
    """Whether a memory quantity is a fraction of a byte (``100m``, ``1.5``: rounded up to whole bytes as the
    kubelet does); False when it is no quantity."""
    try:
        return not is_whole(parse_quantity(raw))
    except QuantityError:
        return False


def rounded_note(where: str, raw: object, unit: str, short: str, value: str) -> str:
    """The one text for a value a conversion rounds up to its whole units (milli-cores, bytes)."""
    return f'{where} "{shown(raw)}" is not whole {unit}: {short} {value} (rounded up)'


def conversion_notes(lists: list[ResourceList], converted: set[tuple[str, int]], cpu_name: str,
                     mem_name: str) -> list[str]:
    """What a conversion makes of a cpu that reads oddly (``_odd_cpu``) or of a memory that is a fraction of a
    byte, for the owners in ``converted`` ((field, index) of a ``lists`` entry, the pod's
    ``resources.resource_lists`` before the conversion)."""
    notes: list[str] = []
    short = SHORT_NAMES.get(cpu_name, cpu_name)
    for owner, field, index, kind, values in lists:
        if (field, index) not in converted:
            continue
        where = f"{owner}: {'' if field == 'overhead' else kind + '.'}"
        raw = values.get(CPU)
        odd = _odd_cpu(raw) if raw is not None else None
        if odd == "(rounded up)":
            notes.append(rounded_note(where + "cpu", raw, "milli-cores", short, milli_cores_text(raw)))
        elif odd is not None:
            notes.append(f'{where}cpu "{raw}" is in memory units: {short} {milli_cores_text(raw)} {odd}')
        raw = values.get(MEMORY)
        if raw is not None and _memory_rounds(raw):
            notes.append(rounded_note(where + "memory", raw, "bytes", SHORT_NAMES.get(mem_name, mem_name),
                                      bytes_text(raw)))
    return notes


HUGEPAGES_ALONE = "Forbidden: HugePages require cpu or memory"   # upstream ValidateResourceRequirements
# The apiserver validates after the webhooks that a container's hugepages come with cpu or memory, and
# batch-cpu/batch-memory are neither (``convert_pod``'s alone). The pod level takes hugepages alone.


def hugepages_text(path: str, pages: str, cpu_name: str, mem_name: str) -> str:
    return (f"{path}: {HUGEPAGES_ALONE} (converted to {cpu_name}/{mem_name}, it would hold {pages} alone, and the "
            f"apiserver refuses that after the webhooks: remove {pages} from the pod, or keep it out of the band "
            "whose resources it is converted to)")



def small_batch_cpu_warnings(lists: list[ResourceList]) -> list[str]:
    """A warning per owner whose batch-cpu is above 0 and under 100 milli-cores: "2" is usually
    meant as 2 cores. Stated as a fact, not a guess: a conversion of ``cpu: 50m`` writes "50" too."""
    warnings: list[str] = []
    for owner, field, _, _, values in lists:
        raw = values.get(BATCH_CPU)
        if raw is None or field == OVERHEAD:  # a null is no quantity either
            continue
        try:
            q = parse_quantity(raw)
        except QuantityError:
            continue
        if 0 < q < SMALL_BATCH_CPU and is_whole(q):
            n = int(q)
            text = (f'{owner}: batch-cpu "{shown(raw)}" is {n} milli-core{"s" if n > 1 else ""}, '
                    f'under a tenth of a core; for {n} core{"s" if n > 1 else ""} write {n}k')
            if text not in warnings:  # requests and limits usually say the same
                warnings.append(text)
    return warnings
