"""The ``slo-controller-config`` ConfigMap: ``colocation-config`` and ``resource-threshold-config``.

Field names follow Koordinator's ``apis/configuration/slo_controller_config.go`` and
``apis/slo/v1alpha1/nodeslo_types.go``, defaults docs/agent.md ("Configuration: `slo-controller-config`"); per-node
overrides (``nodeConfigs`` / ``nodeStrategies``) apply field by field, first matching nodeSelector wins.
A config that does not parse or validate raises ``SloConfigError``; ``ConfigTracker`` keeps the last
good one and reports each distinct problem once. A key no Koordinator struct defines is ignored and told
(``key_notices``: most likely misspelt, with the nearest known key), as is one of Koordinator's that this agent
does not act on (docs/agent.md, "Configuration: `slo-controller-config`").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webhook.agent.domain.cpu_eviction import CPUEvictConfig
from webhook.core.selectors import SelectorError, matches, selector_is_empty, validate_selector

COLOCATION_KEY = "colocation-config"
THRESHOLD_KEY = "resource-threshold-config"
# The ConfigMap's other keys Koordinator reads (apis/configuration/slo_controller_config.go); its extensions may
# register more, so only a data key close to one of these is taken for a misspelling.
KOORDINATOR_DATA_KEYS = (COLOCATION_KEY, THRESHOLD_KEY, "resource-qos-config", "cpu-burst-config", "system-config",
                         "host-application-config", "cpu-normalization-config", "resource-amplification-config")
DATA = "data"   # the section of a notice about a data key itself


class SloConfigError(ValueError):
    """A ConfigMap value that cannot be used; the message names the key and the field."""


class _Strict(BaseModel):
    # Go's json.Unmarshal: wrong JSON types refused, null = unset; keys matched case-insensitively (_Keys.go).
    # Unknown keys are ignored, as there, but told (key_notices).
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class _ColocationNotActed(_Strict):
    """ColocationStrategy's fields (apis/configuration/slo_controller_config.go) this agent does not act on, typed
    as json.Unmarshal decodes them: a wrong type is refused, as koord-manager refuses it."""

    metricAggregatePolicy: dict[str, Any] | None = None        # AggregatePolicy
    metricMemoryCollectPolicy: str | None = None
    cpuCalculatePolicy: str | None = None
    batchCPUThresholdPercent: int | None = None
    batchMemoryThresholdPercent: int | None = None
    extensions: dict[str, Any] | None = None                   # ColocationStrategyExtender


class ColocationStrategy(_ColocationNotActed):
    enable: bool | None = None
    metricAggregateDurationSeconds: int | None = Field(None, ge=1)
    metricReportIntervalSeconds: int | None = Field(None, ge=1)
    cpuReclaimThresholdPercent: int | None = Field(None, ge=0)
    memoryReclaimThresholdPercent: int | None = Field(None, ge=0)
    memoryCalculatePolicy: Literal["usage", "request", "maxUsageRequest"] | None = None
    degradeTimeMinutes: int | None = Field(None, ge=1)
    updateTimeThresholdSeconds: int | None = Field(None, ge=1)
    resourceDiffThreshold: float | None = Field(None, gt=0, le=1)
    # The mid tier (pkg/slo-controller/noderesource/plugins/midresource/plugin.go): the bounds are the struct's
    # validate tags (min=0,max=100). Upstream takes any midReclaimMode but "static" for the default mode; the agent
    # refuses another value, as it refuses an unknown memoryCalculatePolicy (most likely misspelt).
    midReclaimMode: Literal["static"] | None = None
    midCPUThresholdPercent: int | None = Field(None, ge=0, le=100)
    midMemoryThresholdPercent: int | None = Field(None, ge=0, le=100)
    midUnallocatedPercent: int | None = Field(None, ge=0, le=100)
    midStaticCPUReservedPercent: int | None = Field(None, ge=0, le=100)
    midStaticMemoryReservedPercent: int | None = Field(None, ge=0, le=100)


class _ThresholdNotActed(_Strict):
    """ResourceThresholdStrategy's fields (apis/slo/v1alpha1/nodeslo_types.go) this agent does not act on, typed
    as json.Unmarshal decodes them: none since MemoryAllocatableEvict (v1.8) was built."""


class ThresholdStrategy(_ThresholdNotActed):
    enable: bool | None = None
    memoryEvictThresholdPercent: int | None = Field(None, ge=0, le=100)
    memoryEvictLowerPercent: int | None = Field(None, ge=0, le=100)
    # MemoryAllocatableEvict (webhook.agent.domain.memory_eviction): nodeslo_types.go's min=0 and gtfield.
    memoryAllocatableEvictThresholdPercent: int | None = Field(None, ge=0)
    memoryAllocatableEvictLowerPercent: int | None = Field(None, ge=0)
    cpuSuppressThresholdPercent: int | None = Field(None, ge=0, le=100)
    cpuSuppressMinPercent: int | None = Field(None, ge=0, le=100)
    cpuSuppressPolicy: Literal["cpuset", "cfsQuota"] | None = None
    # CPU eviction (webhook.agent.domain.cpu_eviction), the ranges of nodeslo_types.go's validate tags and of
    # koordlet's is*ConfigValid (cpu_evict.go), refused here rather than the feature skipped at run time.
    cpuEvictBESatisfactionUpperPercent: int | None = Field(None, gt=0, lt=100)
    cpuEvictBESatisfactionLowerPercent: int | None = Field(None, gt=0, le=60)
    cpuEvictBEUsageThresholdPercent: int | None = Field(None, ge=0, le=100)
    cpuEvictTimeWindowSeconds: int | None = Field(None, gt=0)
    cpuEvictThresholdPercent: int | None = Field(None, ge=0, le=100)
    cpuEvictLowerPercent: int | None = Field(None, ge=0, le=100)
    cpuAllocatableEvictThresholdPercent: int | None = Field(None, ge=0)
    cpuAllocatableEvictLowerPercent: int | None = Field(None, ge=0)
    cpuEvictPolicy: Literal["evictByRealLimit", "evictByAllocatable"] | None = None
    evictEnabledPriorityThreshold: int | None = Field(None, ge=-(2**31), lt=2**31)     # int32
    allocatableEvictPriorityThreshold: int | None = Field(None, ge=0, le=7999)        # never koord-prod


class _Keys:
    """The keys Koordinator's struct defines at one level of a section, those of them this agent does not act on,
    and where a key of a level below belongs (``inner``: its name here and its keys)."""

    def __init__(self, known: frozenset[str], not_acted: frozenset[str] = frozenset(),
                 inner: tuple[str, _Keys] | None = None) -> None:
        self.known, self.not_acted, self.inner = known, not_acted, inner
        self._folded = {k.lower(): k for k in known}
        self._sorted = sorted(known)

    def go(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with each key renamed to the known one it matches case-insensitively: Go's encoding/json
        prefers an exact match but accepts that one too, the later key winning, in document order."""
        out: dict[str, Any] = {}
        for key, value in doc.items():
            out[key if key in self.known else self._folded.get(key.lower(), key)] = value
        return out

    def nearest(self, key: str) -> str | None:
        near = get_close_matches(key, self._sorted, 1)
        if near:
            return near[0]
        if self.inner is not None:
            name, keys = self.inner
            below = keys.nearest(key)
            return None if below is None else f"{name}.{below}"
        return None


_PROFILE = frozenset({"name", "nodeSelector"})     # NodeCfgProfile, inlined in every node entry


def _keys(model: type[_Strict], not_acted: type[_Strict], *more: str) -> _Keys:
    return _Keys(frozenset(model.model_fields) | frozenset(more), frozenset(not_acted.model_fields))


# ColocationCfg inlines ColocationStrategy; NodeColocationCfg and NodeResourceThresholdStrategy inline it too.
_COLOCATION = _keys(ColocationStrategy, _ColocationNotActed, "nodeConfigs")
_COLOCATION_NODE = _keys(ColocationStrategy, _ColocationNotActed, *_PROFILE)
_THRESHOLD_STRATEGY = _keys(ThresholdStrategy, _ThresholdNotActed)
_THRESHOLD = _Keys(frozenset({"clusterStrategy", "nodeStrategies"}), inner=("clusterStrategy", _THRESHOLD_STRATEGY))
_THRESHOLD_NODE = _keys(ThresholdStrategy, _ThresholdNotActed, *_PROFILE)
_MODEL_KEYS: dict[type[_Strict], _Keys] = {ColocationStrategy: _keys(ColocationStrategy, _ColocationNotActed),
                                           ThresholdStrategy: _THRESHOLD_STRATEGY}
_DATA = _Keys(frozenset(KOORDINATOR_DATA_KEYS), frozenset(KOORDINATOR_DATA_KEYS) - {COLOCATION_KEY, THRESHOLD_KEY})


@dataclass(frozen=True, slots=True)
class KeyNotice:
    """A key of the ConfigMap this agent does not use: one no Koordinator struct defines there (``koordinator``
    False: most likely misspelt; ``suggestion`` the nearest known key), or one of Koordinator's it does not act on."""

    section: str          # the data key it sits under (DATA: a data key itself)
    where: str            # "" (the section's top), "clusterStrategy", 'nodeConfigs[0] (name "big")'
    key: str
    koordinator: bool
    suggestion: str | None = None

    def __str__(self) -> str:
        at = f"{self.section}: " + (f"{self.where}: " if self.where else "")
        if self.koordinator:
            return f'{at}key "{self.key}" is Koordinator\'s but this agent does not act on it'
        hint = f', did you mean "{self.suggestion}"?' if self.suggestion else " (no known key is close)"
        return f'{at}unknown key "{self.key}" is ignored{hint}'


@dataclass(frozen=True, slots=True)
class Colocation:
    """The colocation strategy for one node, every field resolved."""

    enable: bool = False
    metricAggregateDurationSeconds: int = 60
    metricReportIntervalSeconds: int = 60     # koord-manager recomputes a node once per NodeMetric report
    cpuReclaimThresholdPercent: int = 65
    memoryReclaimThresholdPercent: int = 65
    memoryCalculatePolicy: str = "usage"
    degradeTimeMinutes: int = 15
    updateTimeThresholdSeconds: int = 300
    resourceDiffThreshold: float = 0.1
    # Koordinator's defaults (pkg/util/sloconfig/colocation_config.go DefaultColocationStrategy); "" is the
    # default (usage-based) mode.
    midReclaimMode: str = ""
    midCPUThresholdPercent: int = 100
    midMemoryThresholdPercent: int = 100
    midUnallocatedPercent: int = 0
    midStaticCPUReservedPercent: int = 0
    midStaticMemoryReservedPercent: int = 0


# The node labels that override the static mid reserve, as ratios (apis/extension/node_colocation.go), and the
# fields they set (pkg/util/sloconfig/colocation_config.go UpdateColocationStrategyForNode).
MID_STATIC_LABELS = {"node.koordinator.sh/mid-static-cpu-reserved-ratio": "midStaticCPUReservedPercent",
                     "node.koordinator.sh/mid-static-memory-reserved-ratio": "midStaticMemoryReservedPercent"}


def label_percent(raw: str) -> int | None:
    """A ratio label as koord-manager reads it (``getNodeReclaimPercent``): a float, ``int64(v * 100)`` truncated in
    float64 arithmetic (Python's float is the same IEEE double); None for what it ignores (not a number, negative).
    Infinity and NaN, which Go's ParseFloat takes and whose ``int64`` Go leaves undefined, are ignored too."""
    try:
        value = float(raw.strip()) if raw.strip() == raw and "_" not in raw else None
    except ValueError:
        return None
    if value is None or value != value or value in (float("inf"), float("-inf")) or value < 0:
        return None
    return int(value * 100)


def label_overrides(labels: Mapping[str, str]) -> tuple[dict[str, int], tuple[str, ...]]:
    """The fields the mid ratio labels set, and a line for each such label that is ignored (koord-manager ignores
    it too, logging at V(5): said here so that it is not silent)."""
    fields: dict[str, int] = {}
    ignored = []
    for label, name in MID_STATIC_LABELS.items():
        raw = labels.get(label)
        if raw is None:
            continue
        percent = label_percent(raw)
        if percent is None:
            ignored.append(f"node label {label}={raw!r} is ignored: not a ratio >= 0 (as koord-manager ignores it)")
        else:
            fields[name] = percent
    return fields, tuple(ignored)


DEFAULT_EVICT_THRESHOLD = 70  # koordlet's memoryEvictThresholdPercent
# nodeslo_types.go's documented defaults of memoryAllocatableEvict{Threshold,Lower}Percent (koordlet itself skips
# MemoryAllocatableEvict without them; this agent takes the documented ones, as for CPUAllocatableEvict).
DEFAULT_ALLOCATABLE_EVICT_THRESHOLD, DEFAULT_ALLOCATABLE_EVICT_LOWER = 110, 100


@dataclass(frozen=True, slots=True)
class MemoryEvict:
    """The memory eviction keys for one node (resource-threshold-config), resolved: the watermark BEMemoryEvict
    and MemoryEvict share, MemoryEvict's priority threshold and MemoryAllocatableEvict's keys (``None``: not
    configured, the feature needing it does not run)."""

    enable: bool = False
    memoryEvictThresholdPercent: int = DEFAULT_EVICT_THRESHOLD
    memoryEvictLowerPercent: int = DEFAULT_EVICT_THRESHOLD - 2
    evictEnabledPriorityThreshold: int | None = None
    memoryAllocatableEvictThresholdPercent: int = DEFAULT_ALLOCATABLE_EVICT_THRESHOLD
    memoryAllocatableEvictLowerPercent: int = DEFAULT_ALLOCATABLE_EVICT_LOWER
    allocatableEvictPriorityThreshold: int | None = None

    @property
    def memory_evict(self) -> bool:
        """MemoryEvict runs: the watermark on and evictEnabledPriorityThreshold set (memory_evict.go's config check)."""
        return self.enable and self.evictEnabledPriorityThreshold is not None

    @property
    def allocatable_evict(self) -> bool:
        """MemoryAllocatableEvict runs: on, and allocatableEvictPriorityThreshold set."""
        return self.enable and self.allocatableEvictPriorityThreshold is not None


@dataclass(frozen=True, slots=True)
class CPUSuppress:
    """BE CPU suppression for one node (resource-threshold-config), every field resolved."""

    enable: bool = False
    cpuSuppressThresholdPercent: int = 65
    cpuSuppressMinPercent: int | None = None
    cpuSuppressPolicy: str = "cpuset"


@dataclass(frozen=True, slots=True)
class _Override:
    name: str
    selector: Mapping[str, Any]
    fields: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SloConfig:
    colocation: Mapping[str, Any]                 # cluster fields over defaults
    colocation_nodes: tuple[_Override, ...]
    threshold: Mapping[str, Any]
    threshold_nodes: tuple[_Override, ...]

    def for_node(self, labels: Mapping[str, str]) -> tuple[Colocation, MemoryEvict]:
        colo = dict(self.colocation)
        node = _first_match(self.colocation_nodes, labels)
        if node is not None:
            colo.update(node)
            # The cluster switch wins: enable:false there disables every node (isColocationCfgDisabled).
            colo["enable"] = bool(self.colocation.get("enable")) and bool(node.get("enable", colo.get("enable")))
        # The node's ratio labels win over the ConfigMap, nodeConfigs included (UpdateColocationStrategyForNode).
        colo.update(label_overrides(labels)[0])
        return Colocation(**colo), _memory_evict(self._threshold_fields(labels))

    def cpu_evict_for_node(self, labels: Mapping[str, str]) -> CPUEvictConfig:
        fields = self._threshold_fields(labels)
        given = {k: fields[k] for k in CPUEvictConfig.__dataclass_fields__ if k in fields}  # the rest: defaults
        return CPUEvictConfig(**{**given, "enable": bool(given.get("enable", False))})

    def cpu_suppress_for_node(self, labels: Mapping[str, str]) -> CPUSuppress:
        fields = self._threshold_fields(labels)
        given = {k: fields[k] for k in CPUSuppress.__dataclass_fields__ if k in fields}  # the rest: defaults
        return CPUSuppress(**{**given, "enable": bool(given.get("enable", False))})

    def _threshold_fields(self, labels: Mapping[str, str]) -> dict[str, Any]:
        thr = dict(self.threshold)
        node = _first_match(self.threshold_nodes, labels)
        if node is not None:
            thr.update(node)
        return thr


def _first_match(overrides: tuple[_Override, ...], labels: Mapping[str, str]) -> Mapping[str, Any] | None:
    for o in overrides:
        if matches(o.selector, labels):
            return o.fields
    return None


def _memory_evict(fields: Mapping[str, Any]) -> MemoryEvict:
    threshold = fields.get("memoryEvictThresholdPercent", DEFAULT_EVICT_THRESHOLD)
    lower = fields.get("memoryEvictLowerPercent")
    if lower is None:
        lower = max(threshold - 2, 0)
    given = {k: fields[k] for k in ("evictEnabledPriorityThreshold", "memoryAllocatableEvictThresholdPercent",
                                    "memoryAllocatableEvictLowerPercent", "allocatableEvictPriorityThreshold")
             if fields.get(k) is not None}
    return MemoryEvict(bool(fields.get("enable", False)), threshold, lower, **given)


def _describe(key: str, where: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        value = err.get("input")
        parts.append(f"{where}{'.' if where and loc else ''}{loc}: {err['msg']} (got {json.dumps(value)})")
    return f"{key}: " + "; ".join(parts)


def _load(key: str, raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, str):  # a ConfigMap's data values are strings; a files state can hold anything
        raise SloConfigError(f"{key}: must be a string holding JSON, got {type(raw).__name__}")
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SloConfigError(f"{key}: invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SloConfigError(f"{key}: must be a JSON object, got {type(doc).__name__}")
    return doc


def _fields(model: type[_Strict], key: str, where: str, doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise SloConfigError(f"{key}: {where}: must be an object")
    keys = _MODEL_KEYS[model]
    try:
        parsed = model.model_validate(keys.go(doc))
    except ValidationError as exc:
        raise SloConfigError(_describe(key, where, exc)) from None
    return {k: v for k, v in parsed.model_dump(exclude=set(keys.not_acted)).items() if v is not None}


def _overrides(model: type[_Strict], entry: _Keys, key: str, list_name: str, items: Any) -> tuple[_Override, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise SloConfigError(f"{key}: {list_name}: must be a list")
    out = []
    for i, item in enumerate(items):
        where = f"{list_name}[{i}]"
        if not isinstance(item, dict):
            raise SloConfigError(f"{key}: {where}: must be an object")
        item = entry.go(item)
        name = item.get("name")
        name = name if isinstance(name, str) else ""
        selector = item.get("nodeSelector")
        if selector is None or selector_is_empty(selector):
            # koord-manager's ConfigMap webhook text.
            raise SloConfigError(f"{list_name} NodeSelector must not empty error! configType: {key},"
                                 f"nodeConfig name:{name}")
        try:
            validate_selector(selector, f"{where}.nodeSelector")
        except SelectorError as exc:
            raise SloConfigError(f"{key}: {exc}") from None
        fields = {k: v for k, v in item.items() if k not in ("name", "nodeSelector")}
        out.append(_Override(name, selector, _fields(model, key, where, fields)))  # validated: a Mapping
    return tuple(out)


def _check_watermarks(key: str, where: str, fields: Mapping[str, Any]) -> None:
    lower = fields.get("memoryEvictLowerPercent")
    threshold = fields.get("memoryEvictThresholdPercent", DEFAULT_EVICT_THRESHOLD)
    if lower is not None and lower >= threshold:
        raise SloConfigError(f"{key}: {where}memoryEvictLowerPercent ({lower}) must be less than "
                             f"memoryEvictThresholdPercent ({threshold})")
    a_threshold = fields.get("memoryAllocatableEvictThresholdPercent")
    a_lower = fields.get("memoryAllocatableEvictLowerPercent")
    a_threshold = DEFAULT_ALLOCATABLE_EVICT_THRESHOLD if a_threshold is None else a_threshold
    a_lower = DEFAULT_ALLOCATABLE_EVICT_LOWER if a_lower is None else a_lower
    if a_lower >= a_threshold:
        raise SloConfigError(f"{key}: {where}memoryAllocatableEvictLowerPercent ({a_lower}) must be less than "
                             f"memoryAllocatableEvictThresholdPercent ({a_threshold})")


def _check_cpu_evict(key: str, where: str, fields: Mapping[str, Any]) -> None:
    """The relations between CPU eviction keys koordlet's is*ConfigValid checks (cpu_evict.go)."""
    cfg = CPUEvictConfig(**{k: v for k, v in fields.items() if k in CPUEvictConfig.__dataclass_fields__})
    low, up = cfg.cpuEvictBESatisfactionLowerPercent, cfg.cpuEvictBESatisfactionUpperPercent
    if (low is None) != (up is None):
        names = ("cpuEvictBESatisfactionLowerPercent", "cpuEvictBESatisfactionUpperPercent")
        given, missing = names if up is None else names[::-1]
        raise SloConfigError(f"{key}: {where}{given} is set but {missing} is not: BECPUEvict needs both")
    if low is not None and up is not None and up < low:
        raise SloConfigError(f"{key}: {where}cpuEvictBESatisfactionUpperPercent ({up}) must not be less than "
                             f"cpuEvictBESatisfactionLowerPercent ({low})")
    if cfg.cpuEvictThresholdPercent is not None and cfg.lower_percent >= cfg.cpuEvictThresholdPercent:
        raise SloConfigError(f"{key}: {where}cpuEvictLowerPercent ({cfg.lower_percent}) must be less than "
                             f"cpuEvictThresholdPercent ({cfg.cpuEvictThresholdPercent})")
    if cfg.cpuAllocatableEvictLowerPercent >= cfg.cpuAllocatableEvictThresholdPercent:
        raise SloConfigError(f"{key}: {where}cpuAllocatableEvictLowerPercent ({cfg.cpuAllocatableEvictLowerPercent}) "
                             f"must be less than cpuAllocatableEvictThresholdPercent "
                             f"({cfg.cpuAllocatableEvictThresholdPercent})")


def parse_slo_config(data: Mapping[str, Any] | None) -> SloConfig:
    """Parse the ConfigMap's ``data`` (None, a missing key or an empty value mean the defaults)."""
    data = data or {}
    colo_doc = _COLOCATION.go(_load(COLOCATION_KEY, data.get(COLOCATION_KEY)))
    colo_nodes = _overrides(ColocationStrategy, _COLOCATION_NODE, COLOCATION_KEY, "nodeConfigs",
                            colo_doc.get("nodeConfigs"))
    cluster = {k: v for k, v in colo_doc.items() if k != "nodeConfigs"}
    colo = _fields(ColocationStrategy, COLOCATION_KEY, "", cluster)
    thr_doc = _THRESHOLD.go(_load(THRESHOLD_KEY, data.get(THRESHOLD_KEY)))
    strategy = thr_doc.get("clusterStrategy")
    thr = _fields(ThresholdStrategy, THRESHOLD_KEY, "clusterStrategy", {} if strategy is None else strategy)
    _check_watermarks(THRESHOLD_KEY, "clusterStrategy.", thr)
    _check_cpu_evict(THRESHOLD_KEY, "clusterStrategy.", thr)
    thr_nodes = _overrides(ThresholdStrategy, _THRESHOLD_NODE, THRESHOLD_KEY, "nodeStrategies",
                           thr_doc.get("nodeStrategies"))
    for i, o in enumerate(thr_nodes):
        _check_watermarks(THRESHOLD_KEY, f"nodeStrategies[{i}].", {**thr, **o.fields})
        _check_cpu_evict(THRESHOLD_KEY, f"nodeStrategies[{i}].", {**thr, **o.fields})
    return SloConfig(colo, colo_nodes, thr, thr_nodes)


DEFAULT_CONFIG = parse_slo_config(None)


def _readable(raw: object) -> dict[str, Any] | None:
    try:
        return _load("", raw)
    except SloConfigError:
        return None          # parse_slo_config's to report


def _entry(list_name: str, i: int, item: Mapping[str, Any]) -> str:
    name = item.get("name")
    return f"{list_name}[{i}]" + (f' (name "{name}")' if isinstance(name, str) and name else "")


def _scan(out: list[KeyNotice], section: str, where: str, doc: Mapping[str, Any], keys: _Keys) -> None:
    for key in doc:
        if key in keys.not_acted:
            out.append(KeyNotice(section, where, key, True))
        elif key not in keys.known:
            out.append(KeyNotice(section, where, key, False, keys.nearest(key)))


def _scan_entries(out: list[KeyNotice], section: str, list_name: str, items: object, entry: _Keys) -> None:
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, dict):
            item = entry.go(item)
            _scan(out, section, _entry(list_name, i, item), item, entry)


def key_notices(data: Mapping[str, Any] | None) -> tuple[KeyNotice, ...]:
    """The keys of the ConfigMap's ``data`` this agent does not use, in document order, valid config or not;
    a value that cannot be read is parse_slo_config's to report, and not looked into."""
    data = data or {}
    out: list[KeyNotice] = []
    for key in data:
        if key in _DATA.not_acted:
            out.append(KeyNotice(DATA, "", key, True))
        elif key not in _DATA.known:
            near = get_close_matches(key, KOORDINATOR_DATA_KEYS, 1, 0.8)
            if near:
                out.append(KeyNotice(DATA, "", key, False, near[0]))
    colo = _readable(data.get(COLOCATION_KEY))
    if colo is not None:
        colo = _COLOCATION.go(colo)
        _scan(out, COLOCATION_KEY, "", colo, _COLOCATION)
        _scan_entries(out, COLOCATION_KEY, "nodeConfigs", colo.get("nodeConfigs"), _COLOCATION_NODE)
    thr = _readable(data.get(THRESHOLD_KEY))
    if thr is not None:
        thr = _THRESHOLD.go(thr)
        _scan(out, THRESHOLD_KEY, "", thr, _THRESHOLD)
        strategy = thr.get("clusterStrategy")
        if isinstance(strategy, dict):
            _scan(out, THRESHOLD_KEY, "clusterStrategy", _THRESHOLD_STRATEGY.go(strategy), _THRESHOLD_STRATEGY)
        _scan_entries(out, THRESHOLD_KEY, "nodeStrategies", thr.get("nodeStrategies"), _THRESHOLD_NODE)
    return tuple(out)


class ConfigTracker:
    """Keeps the last good config; each distinct problem is returned once (to log and to record), and each
    distinct key notice is in ``fresh`` once."""

    def __init__(self) -> None:
        self.config: SloConfig = DEFAULT_CONFIG
        self.invalid: str | None = None                # why the ConfigMap as it is now is not in force
        self.notices: tuple[KeyNotice, ...] = ()       # the ConfigMap's, as it is now
        self.fresh: tuple[KeyNotice, ...] = ()         # those of them the last update saw first
        self._seen: Any = object()

    @property
    def error(self) -> str | None:
        return None if self.invalid is None else f"{self.invalid}; keeping the last good configuration"

    def update(self, data: Mapping[str, Any] | None) -> str | None:
        """Feed the ConfigMap's current data; returns a new problem to report, else None."""
        if data == self._seen:
            self.fresh = ()
            return None
        # Remembered only once parsed or refused: a data the parser crashed on is tried again next time.
        seen = dict(data) if data is not None else None
        config, invalid = None, None
        try:
            config = parse_slo_config(data)
        except SloConfigError as exc:
            invalid = str(exc)
        notices = key_notices(data)
        self._seen = seen
        told = set(self.notices)
        self.fresh = tuple(n for n in notices if n not in told)
        self.notices = notices
        if config is not None:
            self.config = config
        if invalid is None or invalid == self.invalid:
            self.invalid = invalid
            return None
        self.invalid = invalid
        return self.error
