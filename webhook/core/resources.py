"""Pod resource arithmetic shared by the admission rules and the node agent."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

from webhook.core.fielderrors import invalid
from webhook.core.quantity import QuantityError, exact_add, parse_quantity

CPU, MEMORY = "cpu", "memory"
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
MID_CPU, MID_MEMORY = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"
BATCH_RESOURCES = (BATCH_CPU, BATCH_MEMORY)
MID_RESOURCES = (MID_CPU, MID_MEMORY)
NATIVE_RESOURCES = (CPU, MEMORY)
# The legacy ack-slo-manager protocol's names for the same two resources (milli-cores, bytes): read wherever
# batch-cpu and batch-memory are, never written.
RECLAIMED_CPU, RECLAIMED_MEMORY = "alibabacloud.com/reclaimed-cpu", "alibabacloud.com/reclaimed-memory"
LEGACY_BATCH = {RECLAIMED_CPU: BATCH_CPU, RECLAIMED_MEMORY: BATCH_MEMORY}
BATCH_NAMES = (*BATCH_RESOURCES, *LEGACY_BATCH)   # every name a batch resource goes by


def iter_containers(spec: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(field, index, container) for init containers then containers, as the spec lists them."""
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, dict):
                    yield field, i, c


def _parsed(values: object) -> dict[str, Decimal]:
    """A ResourceList's quantities by name; one that is no quantity is skipped (the validating rules report it)."""
    out: dict[str, Decimal] = {}
    if isinstance(values, dict):
        for name, raw in values.items():
            try:
                out[name] = parse_quantity(raw)
            except QuantityError:
                continue
    return out


def container_requests(container: dict[str, Any]) -> dict[str, Decimal]:
    """A container's requests, a limit standing in for a missing request (API defaulting).

    Unparsable quantities are skipped here; the validating rules report them.
    """
    res = container.get("resources") or {}
    out = _parsed(res.get("limits"))
    out.update(_parsed(res.get("requests")))  # requests win over limits
    return out


_ZERO = Decimal(0)


def _add_into(acc: dict[str, Decimal], more: dict[str, Decimal]) -> dict[str, Decimal]:
    """``acc`` += ``more``, in place (every caller owns ``acc``: no copy per container)."""
    for k, v in more.items():
        acc[k] = exact_add(acc.get(k, _ZERO), v)
    return acc


def _max_into(acc: dict[str, Decimal], more: dict[str, Decimal]) -> dict[str, Decimal]:
    for k, v in more.items():
        if v > acc.get(k, _ZERO):
            acc[k] = v
    return acc


# What the apiserver takes in ``spec.resources`` (``IsSupportedPodLevelResource``): cpu, memory, hugepages-*.
HUGEPAGES_PREFIX = "hugepages-"
POD_LEVEL_OWNER = "the pod (spec.resources)"
# The ``resource_lists`` field of spec.overhead: the RuntimeClass's, not the pod author's, so the batch checks
# leave it out.
OVERHEAD = "overhead"


def pod_level_supported(name: str) -> bool:
    return name in NATIVE_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


def container_limits(container: dict[str, Any]) -> dict[str, Decimal]:
    """A container's limits (unparsable ones skipped, as in ``container_requests``)."""
    res = container.get("resources")
    return _parsed(res.get("limits")) if isinstance(res, dict) else {}


def pod_level(spec: dict[str, Any]) -> tuple[dict[str, Decimal], dict[str, Decimal]] | None:
    """(requests, limits) of ``spec.resources`` as the apiserver keeps them, or None when it sets none of the
    resources a pod level takes (``IsPodLevelResourcesSet``): the common pod pays one lookup.

    Defaulting (``defaultPodRequests``, before the webhooks) is applied when it has not been: with pod-level
    limits, a missing pod-level request is the containers' aggregate request when that is above 0, else the limit.
    """
    res = spec.get("resources")
    if not isinstance(res, dict) or not res:
        return None
    requests = {k: v for k, v in _parsed(res.get("requests")).items() if pod_level_supported(k)}
    limits = {k: v for k, v in _parsed(res.get("limits")).items() if pod_level_supported(k)}
    if not requests and not limits:
        return None
    missing = [k for k in limits if k not in requests]
    if missing:
        aggregate = aggregate_containers(spec, container_requests)
        for k in missing:
            value = aggregate.get(k, _ZERO)
            requests[k] = value if value > 0 else limits[k]
    return requests, limits


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """Effective pod requests as the scheduler and quota count them (k8s ``PodRequests``): the containers'
    aggregate, the pod-level requests in place of it for what they name, plus ``spec.overhead``."""
    return _effective(pod, container_requests, limits=False)


def pod_limits(pod: dict[str, Any]) -> dict[str, Decimal]:
    """Effective pod limits (k8s ``PodLimits``): the containers' aggregate, the pod-level limits in place of it for
    what they name, plus ``spec.overhead`` on the resources that have a limit."""
    return _effective(pod, container_limits, limits=True)


def _effective(pod: dict[str, Any], per_container: Callable[[dict[str, Any]], dict[str, Decimal]],
               limits: bool) -> dict[str, Decimal]:
    spec = pod.get("spec") or {}
    total = aggregate_containers(spec, per_container)
    level = pod_level(spec) if "resources" in spec else None
    if level is not None:
        total.update(level[1] if limits else level[0])
    _add_overhead(total, spec, every=not limits)
    return total


def _add_overhead(total: dict[str, Decimal], spec: dict[str, Any], every: bool) -> None:
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        for name, value in _parsed(overhead).items():
            if every or name in total:
                total[name] = exact_add(total.get(name, _ZERO), value)


def pod_total(pod: dict[str, Any], per_container: Callable[[dict[str, Any]], dict[str, Decimal]]) -> dict[str, Decimal]:
    """``aggregate_containers`` of ``per_container`` values plus ``spec.overhead`` (every name it holds)."""
    spec = pod.get("spec") or {}
    total = aggregate_containers(spec, per_container)
    _add_overhead(total, spec, every=True)
    return total


def aggregate_containers(spec: dict[str, Any],
                         per_container: Callable[[dict[str, Any]], dict[str, Decimal]]) -> dict[str, Decimal]:
    """The containers' total of ``per_container`` values, the way k8s ``AggregateContainerRequests``/``Limits``
    add them.

    Regular containers are summed; restartable (sidecar) init containers add to that sum and
    to every later init container; the result is the max of both.
    ``per_container`` must return a fresh map (it is added into).
    """
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            _add_into(total, per_container(c))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        if not isinstance(c, dict):
            continue
        reqs = per_container(c)  # a fresh map: ours to change
        if c.get("restartPolicy") == "Always":
            _add_into(total, reqs)
            _add_into(sidecars, reqs)
            reqs = sidecars
        else:
            _add_into(reqs, sidecars)
        _max_into(init_peak, reqs)
    _max_into(total, init_peak)
    return total


ResourceList = tuple[str, str, int, str, dict[str, Any]]  # (owner, field, index, kind, values)


def resource_lists(spec: dict[str, Any]) -> list[ResourceList]:
    """Every non-empty requests/limits map of the init containers and containers, then of the pod level
    (``spec.resources``), then ``spec.overhead``.

    Each entry is (owner, field, index, kind, values): owner reads like ``container "app"``,
    ``init container "setup"``, ``the pod (spec.resources)`` or ``pod overhead``; field is initContainers,
    containers, resources or overhead; kind is requests, limits or overhead. The field path is left to
    ``resource_list_path``, built only when a message needs it (this runs on every review).
    """
    out: list[ResourceList] = []
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not isinstance(items, list):
            continue
        kind_of_owner = "init container" if field == "initContainers" else "container"
        for i, c in enumerate(items):
            if not isinstance(c, dict):
                continue
            res = c.get("resources")
            if not isinstance(res, dict):
                continue
            owner = None
            for kind in ("requests", "limits"):
                values = res.get(kind)
                if isinstance(values, dict) and values:
                    if owner is None:
                        owner = f'{kind_of_owner} "{c.get("name", "")}"'
                    out.append((owner, field, i, kind, values))
    level = spec.get("resources")  # pod-level resources: absent on most pods, one lookup
    if isinstance(level, dict) and level:
        for kind in ("requests", "limits"):
            values = level.get(kind)
            if isinstance(values, dict) and values:
                out.append((POD_LEVEL_OWNER, "resources", 0, kind, values))
    overhead = spec.get("overhead")
    if isinstance(overhead, dict) and overhead:
        out.append(("pod overhead", OVERHEAD, 0, OVERHEAD, overhead))
    return out


def resource_list_path(field: str, index: int, kind: str) -> str:
    """The field path of a ``resource_lists`` entry: ``spec.containers[0].resources.requests``."""
    if field == OVERHEAD:
        return "spec.overhead"
    if field == "resources":
        return f"spec.resources.{kind}"
    return f"spec.{field}[{index}].resources.{kind}"


def names_batch(lists: Iterable[ResourceList]) -> bool:
    """Whether any requests, limits or overhead (``resource_lists``) names a batch resource, by either protocol."""
    return any(name in values for *_, values in lists for name in BATCH_NAMES)


def asks(raw: object) -> bool:
    """Whether a quantity asks for its resource: above zero. An unparsable one counts (it is
    reported by ``quantity_errors``, and must not pass for "asks for nothing")."""
    try:
        return parse_quantity(raw) > 0
    except QuantityError:
        return True


def shown(raw: object) -> str:
    """A quantity as a message quotes it (a JSON number as its text)."""
    return raw if isinstance(raw, str) else str(raw)


def quantity_errors(lists: list[ResourceList]) -> list[str]:
    """Upstream field errors for every requests/limits/overhead value that is not a quantity, in spec
    order: ``spec.containers[0].resources.requests[cpu]: Invalid value: "abc": quantities must match ...``.

    The apiserver refuses such a pod when it decodes it (400, the same quantity text without the
    field); a webhook can be sent one anyway (``review``, a direct post, another webhook's patch).
    ``lists``: the pod's ``resource_lists``.
    """
    errors: list[str] = []
    for _, field, index, kind, values in lists:
        for name, raw in values.items():
            try:
                parse_quantity(raw)
            except QuantityError as exc:
                errors.append(invalid(f"{resource_list_path(field, index, kind)}[{name}]", shown(raw), str(exc)))
    return errors


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a map, else an empty one: a field of a hand-written object (a pod, a quota, a
    LimitRange) may hold anything, and a rule reads a non-object as absent."""
    return value if isinstance(value, dict) else {}


def _is_map(value: object) -> bool:
    """A map, or absent (JSON null decodes as absent); ``[]``, ``""`` or ``0`` are not."""
    return value is None or type(value) is dict


def _is_text(value: object) -> bool:
    return value is None or type(value) is str


def pod_shape_error(pod: dict[str, Any]) -> str | None:
    """Why the pod's outline (the fields the rules read) is not what the API defines, or None.

    The apiserver could not have decoded such a pod; a webhook can be sent one anyway (``review``, a
    direct post), and a rule reading it must get a clear 400, not a TypeError. The field paths are
    only built for the answer (this runs on every review).
    """
    meta, spec = pod.get("metadata"), pod.get("spec")
    if not _is_map(meta):
        return "metadata: Invalid value: must be an object"
    meta = meta or {}
    for key in ("name", "namespace", "generateName"):
        if not _is_text(meta.get(key)):
            return f"metadata.{key}: Invalid value: must be a string"
    for key in ("labels", "annotations"):
        values = meta.get(key)
        if not _is_map(values):
            return f"metadata.{key}: Invalid value: must be a map of strings"
        for name, value in (values or {}).items():
            if type(value) is not str:
                return f"metadata.{key}[{name}]: Invalid value: must be a string"
    if type(spec) is not dict:
        return "spec: Required value: a pod needs a spec"
    for key in ("priorityClassName", "schedulerName", "preemptionPolicy", "nodeName"):
        if not _is_text(spec.get(key)):
            return f"spec.{key}: Invalid value: must be a string"
    priority = spec.get("priority")
    if priority is not None and type(priority) is not int:  # bool is no int here
        return "spec.priority: Invalid value: must be an integer"
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if items is None:
            continue
        if (err := _objects_error(items)) is not None:
            return f"spec.{key}{err}"
        for i, c in enumerate(items):
            if not _is_text(c.get("name")):
                return f"spec.{key}[{i}].name: Invalid value: must be a string"
            res = c.get("resources")
            if res is None:
                continue
            if type(res) is not dict:
                return f"spec.{key}[{i}].resources: Invalid value: must be an object"
            for kind in ("requests", "limits"):
                if not _is_map(res.get(kind)):
                    return f"spec.{key}[{i}].resources.{kind}: Invalid value: must be a map of quantities"
    if not _is_map(spec.get("overhead")):
        return "spec.overhead: Invalid value: must be a map of quantities"
    level = spec.get("resources")
    if level is not None:
        if type(level) is not dict:
            return "spec.resources: Invalid value: must be an object"
        for kind in ("requests", "limits"):
            if not _is_map(level.get(kind)):
                return f"spec.resources.{kind}: Invalid value: must be a map of quantities"
    return _affinity_error(spec.get("affinity")) or _status_error(pod.get("status"))


def _objects_error(items: Any) -> str | None:
    """Why ``items`` is not a list of objects, after its field's path (built only then), or None."""
    if type(items) is not list:
        return ": Invalid value: must be a list"
    for i, item in enumerate(items):
        if type(item) is not dict:
            return f"[{i}]: Invalid value: must be an object"
    return None


def _affinity_error(affinity: Any) -> str | None:
    """The pod (anti-)affinity terms the quota scopes read (CrossNamespacePodAffinity)."""
    if not _is_map(affinity):
        return "spec.affinity: Invalid value: must be an object"
    if not affinity:
        return None
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(kind)
        if not _is_map(terms):
            return f"spec.affinity.{kind}: Invalid value: must be an object"
        for field, inner in (("requiredDuringSchedulingIgnoredDuringExecution", None),
                             ("preferredDuringSchedulingIgnoredDuringExecution", "podAffinityTerm")):
            items = (terms or {}).get(field)
            if items is None:
                continue
            if (err := _objects_error(items)) is not None:
                return f"spec.affinity.{kind}.{field}{err}"
            for i, item in enumerate(items):
                if inner is not None and not _is_map(item.get(inner)):
                    return f"spec.affinity.{kind}.{field}[{i}].{inner}: Invalid value: must be an object"
    return None


def _status_error(status: Any) -> str | None:
    if not _is_map(status):
        return "status: Invalid value: must be an object"
    for key in ("phase", "qosClass"):
        if not _is_text((status or {}).get(key)):
            return f"status.{key}: Invalid value: must be a string"
    return None


def review_shape_error(pod: dict[str, Any], old_pod: dict[str, Any] | None) -> str | None:
    """``pod_shape_error`` of a review's object, then of its oldObject (an UPDATE's), prefixed so."""
    shape = pod_shape_error(pod)
    if shape is None and old_pod is not None:
        old = pod_shape_error(old_pod)
        shape = None if old is None else f"oldObject.{old}"
    return shape
