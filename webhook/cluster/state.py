"""The read-only cluster view both programs query, kept in memory as raw dicts.

A source (``files`` or ``live``) writes into a ``ClusterState``; rules and the agent only read.
A source marks an object invalid by the one judgement of what enters the state (``webhook/cluster/intake.py``):
one the apiserver's checks refuse, a ClusterColocationProfile no rule can apply, or one with an unknown field, from
the live source. A profile stays visible, compiled with the reason as its error, so the rules fail closed and say
why; an object of another kind is left out (a rule never reads it), its reason kept for the metrics.

A watch event costs O(1): the object is set in its kind's dict in place (a reader takes one object at a time, or
a snapshot with ``list()``, which the interpreter makes without letting a writer in between). What is derived from
the objects (compiled profiles, quotas by namespace, the default PriorityClass) depends on one kind and is dropped
only when that kind changes in a field the rules read: a ResourceQuota's status, updated by every pod created in
its namespace, or an object's resourceVersion alone, changes nothing derived.
"""

from __future__ import annotations

import copy
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from webhook.cluster.freshness import stale_reason
from webhook.cluster.profiles import Profile, compile_profile
from webhook.core.priority import SYSTEM_PRIORITY_CLASSES, default_priority_class

SLO_CONFIG_NAMESPACE = "koordinator-system"
SLO_CONFIG_NAME = "slo-controller-config"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
T = TypeVar("T")
P = ParamSpec("P")
_MISSING: Any = object()
_NOTHING: dict[str, Any] = {}  # a kind with nothing derived yet
_Compiled = tuple[list[Profile], dict[int, Profile]]


@dataclass(frozen=True, slots=True)
class Kind:
    """One API resource the state holds, with what a REST client needs to list and watch it."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        Kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False),
        Kind("Namespace", "", "v1", "namespaces", False),
        Kind("ResourceQuota", "", "v1", "resourcequotas", True),
        Kind("LimitRange", "", "v1", "limitranges", True),
        Kind("ClusterColocationProfile", "config.koordinator.sh", "v1alpha1", "clustercolocationprofiles", False),
        Kind("ConfigMap", "", "v1", "configmaps", True),
        Kind("Node", "", "v1", "nodes", False),
        Kind("Pod", "", "v1", "pods", True),
    )
}
# What the admission webhook needs; the agent asks for Node, Pod and ConfigMap.
WEBHOOK_KINDS = ("PriorityClass", "Namespace", "ResourceQuota", "LimitRange", "ClusterColocationProfile", "ConfigMap")
AGENT_KINDS = ("Node", "Pod", "ConfigMap")

Key = tuple[str, str]  # (namespace or "", name)
# The kinds whose invalid objects stay in the state, marked (the rules fail closed on them and say why); an invalid
# object of any other kind is left out.
KEPT_WHEN_INVALID = frozenset({"ClusterColocationProfile"})


def _meta(obj: dict[str, Any], field: str) -> Any:
    return (obj.get("metadata") or {}).get(field)


# Per kind, the part of an object anything derived from it reads; an update that leaves it alone (a quota's
# status, a resourceVersion, managedFields) changes nothing derived. Kinds not listed: any change counts.
_READ: dict[str, Callable[[dict[str, Any]], Any]] = {
    "ResourceQuota": lambda o: (o.get("spec"), (o.get("status") or {}).get("hard")),   # not status.used
    "LimitRange": lambda o: o.get("spec"),
    "Namespace": lambda o: _meta(o, "labels"),
    "PriorityClass": lambda o: (o.get("value"), o.get("globalDefault"), o.get("preemptionPolicy")),
    "ClusterColocationProfile": lambda o: (o.get("spec"), _meta(o, "labels"), _meta(o, "annotations")),
    "ConfigMap": lambda o: (o.get("data"), _meta(o, "labels"), _meta(o, "annotations")),
}


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_META_KEPT = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
              "labels", "annotations", "ownerReferences")
# The kinds the admission rules read (_KEPT below) are read by name, labels and annotations only; at 10 000
# namespaces and 5 000 quotas their uid, resourceVersion, timestamps and generation would be MiBs of strings
# nobody reads (docs/benchmarks.md; the live source takes a watch's resourceVersion from the event, before this).
_META_KEPT_READ = ("name", "namespace", "labels", "annotations")
# Per kind, the top-level fields worth holding: what the rules and the agent read (status: the quota's hard
# list only, as its used counts change with every pod). Kinds not listed keep every top-level field.
_KEPT: dict[str, tuple[str, ...]] = {
    "Namespace": (),
    "ResourceQuota": ("spec", "status"),
    "LimitRange": ("spec",),
    "PriorityClass": ("value", "globalDefault", "preemptionPolicy"),
    "ClusterColocationProfile": ("spec",),
    "ConfigMap": ("data",),
}


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def _shared(values: Any) -> Any:
    """A map of strings with its keys and values interned: label values (a team, "true") and quota amounts ("64",
    "256Gi") repeat across thousands of objects, and one string each is 50 bytes held per object; so do the keys,
    which a YAML parser (unlike orjson, with its cache of keys) makes anew for every object."""
    if not isinstance(values, dict):
        return values
    return {_interned(k): _interned(v) for k, v in values.items()}


def kept(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with only what is read of it: at scale, ``managedFields``, kubectl's last-applied copy, a
    namespace's ``spec``/``status`` and a quota's ``status.used`` are most of an object and read by nothing.
    Repeated strings are shared, and a quota's ``status.hard`` that equals its ``spec.hard`` is that same map."""
    meta = obj.get("metadata")
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}
    if isinstance(meta, dict):
        small = {k: meta[k] for k in (_META_KEPT_READ if kind in _KEPT else _META_KEPT) if k in meta}
        annotations = small.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            small["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        for key in ("name", "namespace"):  # a namespace's name recurs in its label and in its quotas
            if type(small.get(key)) is str:
                small[key] = sys.intern(small[key])
        if "labels" in small:
            small["labels"] = _shared(small["labels"])
        out["metadata"] = small
    fields = _KEPT.get(kind)
    out.update((_interned(k), v) for k, v in obj.items() if k not in out and (fields is None or k in fields))
    if kind == "ResourceQuota":
        spec, status = out.get("spec"), out.get("status")
        hard = spec.get("hard") if isinstance(spec, dict) else None
        if isinstance(spec, dict) and isinstance(hard, dict):
            hard = _shared(hard)
            out["spec"] = {**spec, "hard": hard}
        if isinstance(status, dict):
            # The quota controller copies spec.hard into status.hard: one map for both while they agree.
            out["status"] = {k: (hard if v == hard else _shared(v)) for k, v in status.items() if k == "hard"}
    return out


def _read_of(kind: str, obj: dict[str, Any]) -> Any:
    read = _READ.get(kind)
    return read(obj) if read is not None else obj


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class ClusterState:
    """In-memory objects by kind, plus which kinds have completed their first sync."""

    def __init__(self, kinds: Iterable[str] = tuple(KINDS)) -> None:
        self.kinds = tuple(kinds)
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {k: {} for k in self.kinds}
        self._invalid: dict[str, dict[Key, str]] = {}  # kind -> key -> why the object must not be used
        self._synced: set[str] = set()
        self._errors: dict[str, str] = {}
        self._lock = threading.Lock()  # writers only
        self._derived: dict[str, dict[str, Any]] = {k: {} for k in self.kinds}   # kind -> key -> value
        self._last: dict[str, Any] = {}   # key -> the value last built, kept across changes (one per key)
        self.generation = 0
        # The files source's last reload, when it failed (the last good state is served) and how often it did.
        self.reload_error: str | None = None
        self.failed_reloads = 0
        # Written by the live source only (a folder is the truth it holds, so it has no age): per kind, when the
        # cache was last known current (time.monotonic(): its last list, event, bookmark or watch ended by the
        # server) and when it was last listed whole (Unix time).
        self._current_at: dict[str, float] = {}
        self._listed_at: dict[str, float] = {}
        self.max_age: float | None = None   # unready while a kind is older (serve --max-cache-age); None: never

    # -- writes (sources) -------------------------------------------------------------
    def replace(self, kind: str, objects: Iterable[dict[str, Any]], invalid: Mapping[Key, str] | None = None) -> None:
        marks = invalid or {}
        fresh = {object_key(o): o for o in objects}
        if marks and kind not in KEPT_WHEN_INVALID:  # left out, their reasons kept
            fresh = {key: o for key, o in fresh.items() if key not in marks}
        with self._lock:
            self._objects[kind] = fresh
            self._invalid[kind] = dict(invalid or {})
            self._touch(kind)

    def replace_all(self, by_kind: dict[str, list[dict[str, Any]]],
                    invalid: Mapping[str, Mapping[Key, str]] | None = None) -> None:
        """Swap every kind at once (a reloaded folder), so readers see old or new, never a mix; ``invalid``: per
        kind, the objects marked (``KEPT_WHEN_INVALID`` kinds only: another kind's are left out)."""
        marks = {k: dict(m) for k, m in (invalid or {}).items() if m}
        fresh = {k: {key: o for o in by_kind.get(k, []) if (key := object_key(o)) not in marks.get(k, ())
                     or k in KEPT_WHEN_INVALID} for k in self.kinds}
        with self._lock:
            self._objects = fresh
            self._invalid = marks
            self._synced = set(self.kinds)
            self._errors.clear()
            for kind in self.kinds:
                self._touch(kind)

    def upsert(self, kind: str, obj: dict[str, Any], invalid: str | None = None) -> None:
        key = object_key(obj)
        with self._lock:
            objects = self._objects.setdefault(kind, {})
            if invalid is not None and kind not in KEPT_WHEN_INVALID:  # left out: as if deleted, its reason kept
                gone = objects.pop(key, None)
                if self._mark(kind, key, invalid) or gone is not None:
                    self._touch(kind)
                return
            old = objects.get(key)
            objects[key] = obj
            marked = self._mark(kind, key, invalid)
            if old is None or marked or _read_of(kind, old) != _read_of(kind, obj):
                self._touch(kind)

    def delete(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        with self._lock:
            gone = self._objects.get(kind, {}).pop(key, None)
            marked = self._mark(kind, key, None)
            if gone is not None or marked:
                self._touch(kind)

    def _mark(self, kind: str, key: Key, invalid: str | None) -> bool:
        """Set or clear an object's invalid mark; whether that changed anything."""
        marks = self._invalid.get(kind, {})
        if marks.get(key) == invalid:
            return False
        marks = dict(marks)
        if invalid is None:
            del marks[key]
        else:
            marks[key] = invalid
        self._invalid[kind] = marks
        return True

    def reload_failed(self, error: str | None) -> None:
        """The files source's reload failed (``error``: why; the last good state stays), or succeeded (None)."""
        if error is not None:
            self.failed_reloads += 1
        self.reload_error = error

    def mark_synced(self, kind: str) -> None:
        with self._lock:
            self._synced = self._synced | {kind}
            self._errors.pop(kind, None)

    def mark_unsynced(self, kind: str, reason: str) -> None:
        with self._lock:
            self._synced = self._synced - {kind}
            self._errors[kind] = reason

    def mark_current(self, kind: str, at: float) -> None:
        """The cache of ``kind`` was current at ``at`` (``time.monotonic()``)."""
        self._current_at[kind] = at

    def mark_listed(self, kind: str, at: float, wall: float) -> None:
        """``kind`` was listed whole, at ``at`` (``time.monotonic()``) and ``wall`` (Unix time)."""
        self._current_at[kind] = at
        self._listed_at[kind] = wall

    def _touch(self, kind: str) -> None:
        self.generation += 1
        self._derived[kind] = {}

    # -- readiness ----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._synced.issuperset(self.kinds)

    def not_ready_reason(self, now: float | None = None) -> str | None:
        """Why /readyz is 503: a kind not listed yet, or (with ``max_age``) a kind whose cache is older than that
        at ``now`` (``time.monotonic()``; None: the present). None when ready."""
        missing = [k for k in self.kinds if k not in self._synced]
        if missing:
            details = [f"{k} ({self._errors[k]})" if k in self._errors else k for k in missing]
            return "cluster state not synced yet: " + ", ".join(details)
        if self.max_age is None:
            return None
        return stale_reason(self.ages(time.monotonic() if now is None else now), self.max_age)

    def ages(self, now: float) -> dict[str, float]:
        """Per kind the live source keeps, the seconds since its cache was last known current, at ``now``
        (``time.monotonic()``)."""
        return {k: max(0.0, now - at) for k in self.kinds if (at := self._current_at.get(k)) is not None}

    def listed_at(self) -> dict[str, float]:
        """Per kind the live source keeps, the Unix time of its last complete list."""
        return {k: at for k in self.kinds if (at := self._listed_at.get(k)) is not None}

    def sync_error(self) -> str | None:
        """Why the first kind that failed before its first complete list did (None: none has failed so)."""
        with self._lock:
            return next((e for k, e in self._errors.items() if k not in self._synced), None)

    def synced_kinds(self) -> frozenset[str]:
        return frozenset(self._synced)

    def counts(self) -> dict[str, int]:
        return {k: len(self._objects.get(k, {})) for k in self.kinds}

    # -- reads --------------------------------------------------------------------------
    def objects(self, kind: str) -> list[dict[str, Any]]:
        # list() of a dict view is made in one step a writer thread cannot interleave with: a snapshot.
        return list(self._objects.get(kind, {}).values())

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self._objects.get(kind, {}).get((namespace, name))

    def invalid(self, kind: str) -> Mapping[Key, str]:
        """The objects of ``kind`` a source marked invalid, with the reason (rules must not use them): for a kind
        not in ``KEPT_WHEN_INVALID``, the objects left out."""
        return self._invalid.get(kind, {})

    def invalid_counts(self) -> dict[str, int]:
        """Per kind, how many objects a source refused (left out, or kept marked)."""
        return {k: len(self._invalid.get(k, {})) for k in self.kinds}

    def derived(self, kind: str, key: str, build: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``build(*args)``, a value computed from the objects of ``kind``, rebuilt after that kind changes in a
        field the rules read (rules' caches). One key always holds one type: the key names what ``build`` makes.
        The arguments rather than a closure: a hit (every review, several times) builds nothing."""
        value: T = self._derived.get(kind, _NOTHING).get(key, _MISSING)
        if value is _MISSING:  # the kind's map is taken before the build: one a change replaced meanwhile is dropped
            value = self._derived.setdefault(kind, {}).setdefault(key, build(*args, **kwargs))
        return value

    def derived_from_last(self, kind: str, key: str, build: Callable[Concatenate[T | None, P], T],
                          *args: P.args, **kwargs: P.kwargs) -> T:
        """``derived``, where ``build`` gets, before its arguments, the value built before the change (None the
        first time), so it can keep what the change left alone (the profiles that did not change stay compiled)."""
        value: T = self._derived.get(kind, _NOTHING).get(key, _MISSING)
        if value is _MISSING:
            derived = self._derived.setdefault(kind, {})  # before the build, as in ``derived``
            value = build(cast("T | None", self._last.get(key)), *args, **kwargs)
            self._last[key] = value
            value = derived.setdefault(key, value)
        return value

    def priority_class(self, name: str) -> dict[str, Any] | None:
        pc = self._objects.get("PriorityClass", {}).get(("", name))
        if pc is None:
            pc = SYSTEM_PRIORITY_CLASSES.get(name)
        return pc

    def default_priority_class(self) -> dict[str, Any] | None:
        return self.derived("PriorityClass", "default_pc", self._default_priority_class)

    def _default_priority_class(self) -> dict[str, Any] | None:
        return default_priority_class(self.objects("PriorityClass"))

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels (with ``kubernetes.io/metadata.name``), or None when unknown."""
        ns = self._objects.get("Namespace", {}).get(("", namespace))
        if ns is None:
            return None
        labels = dict((ns.get("metadata") or {}).get("labels") or {})
        labels.setdefault(NAMESPACE_NAME_LABEL, namespace)
        return labels

    def colocation_profiles(self) -> list[Profile]:
        """Every ClusterColocationProfile compiled (``webhook/cluster/profiles.py``), in name order (the order they
        apply in). One a source marked (``invalid``: no rule can apply it, an unknown field) has the mark as its
        ``error`` and never matches. Compiled once per object: a change of one profile compiles that one."""
        return self.derived_from_last("ClusterColocationProfile", "compiled_profiles", self._compiled_profiles)[0]

    def _compiled_profiles(self, last: _Compiled | None) -> _Compiled:
        """(the profiles, marked; id(object) -> it compiled, unmarked). A source replaces the object of a changed
        profile and leaves the others as they were: the others are kept by identity."""
        known = last[1] if last is not None else {}
        compiled: dict[int, Profile] = {}
        marks = self.invalid("ClusterColocationProfile")
        out = []
        for key, obj in sorted(self._objects.get("ClusterColocationProfile", {}).items()):
            p = known.get(id(obj))
            if p is None or p.obj is not obj:
                p = compile_profile(obj)
            compiled[id(obj)] = p
            why = marks.get(key)
            if why is not None and p.error != why:
                p = copy.copy(p)   # the mark on a copy: the compiled profile stays as it was, for a later set
                p.error = why
            out.append(p)
        return out, compiled

    def _in_namespace(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return self.derived(kind, "by_namespace", self._by_namespace, kind).get(namespace, [])

    def _by_namespace(self, kind: str) -> dict[str, list[dict[str, Any]]]:
        by_ns: dict[str, list[dict[str, Any]]] = {}
        for (ns, _), obj in sorted(self._objects.get(kind, {}).items()):
            by_ns.setdefault(ns, []).append(obj)
        return by_ns

    def resource_quotas(self, namespace: str) -> list[dict[str, Any]]:
        return self._in_namespace("ResourceQuota", namespace)

    def limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        return self._in_namespace("LimitRange", namespace)

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get("ConfigMap", {}).get((namespace, name))

    def node(self, name: str) -> dict[str, Any] | None:
        return self._objects.get("Node", {}).get(("", name))

    def pods_on_node(self, node_name: str) -> list[dict[str, Any]]:
        """The node's pods; the same list (not to be changed) until the state changes, so a caller that runs
        every second can tell nothing changed."""
        return self.derived("Pod", "pods_on_node/" + node_name, lambda: [
            p for p in self.objects("Pod") if (p.get("spec") or {}).get("nodeName") == node_name])
