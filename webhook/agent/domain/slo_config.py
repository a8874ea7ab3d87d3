"""The ``slo-controller-config`` ConfigMap: ``colocation-config`` and ``resource-threshold-config``.

Field names follow Koordinator's ``apis/configuration/slo_controller_config.go`` and
``apis/slo/v1alpha1/nodeslo_types.go``, defaults docs/agent.md ("Configuration: `slo-controller-config`"); per-node
overrides (``nodeConfigs`` / ``nodeStrategies``) apply field by field, first matching nodeSelector wins.
A config that does not parse or validate raises ``SloConfigError``; ``ConfigTracker`` keeps the last
good one and reports each distinct problem once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webhook.core.selectors import SelectorError, matches, selector_is_empty, validate_selector

COLOCATION_KEY = "colocation-config"
THRESHOLD_KEY = "resource-threshold-config"


class SloConfigError(ValueError):
    """A ConfigMap value that cannot be used; the message names the key and the field."""


class _Strict(BaseModel):
    # Go's json.Unmarshal: unknown fields ignored, wrong JSON types refused, null = unset.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class ColocationStrategy(_Strict):
    enable: bool | None = None
    metricAggregateDurationSeconds: int | None = Field(None, ge=1)
    metricReportIntervalSeconds: int | None = Field(None, ge=1)
    cpuReclaimThresholdPercent: int | None = Field(None, ge=0)
    memoryReclaimThresholdPercent: int | None = Field(None, ge=0)
    memoryCalculatePolicy: Literal["usage", "request", "maxUsageRequest"] | None = None
    degradeTimeMinutes: int | None = Field(None, ge=1)
    updateTimeThresholdSeconds: int | None = Field(None, ge=1)
    resourceDiffThreshold: float | None = Field(None, gt=0, le=1)


class ThresholdStrategy(_Strict):
    enable: bool | None = None
    memoryEvictThresholdPercent: int | None = Field(None, ge=0, le=100)
    memoryEvictLowerPercent: int | None = Field(None, ge=0, le=100)
    cpuSuppressThresholdPercent: int | None = Field(None, ge=0, le=100)
    cpuSuppressMinPercent: int | None = Field(None, ge=0, le=100)
    cpuSuppressPolicy: Literal["cpuset", "cfsQuota"] | None = None


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


DEFAULT_EVICT_THRESHOLD = 70  # koordlet's memoryEvictThresholdPercent


@dataclass(frozen=True, slots=True)
class MemoryEvict:
    """The memory watermark for one node (resource-threshold-config), every field resolved."""

    enable: bool = False
    memoryEvictThresholdPercent: int = DEFAULT_EVICT_THRESHOLD
    memoryEvictLowerPercent: int = DEFAULT_EVICT_THRESHOLD - 2


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
        return Colocation(**colo), _memory_evict(self._threshold_fields(labels))

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
    return MemoryEvict(bool(fields.get("enable", False)), threshold, lower)


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
    try:
        parsed = model.model_validate(doc)
    except ValidationError as exc:
        raise SloConfigError(_describe(key, where, exc)) from None
    return {k: v for k, v in parsed.model_dump().items() if v is not None}


def _overrides(model: type[_Strict], key: str, list_name: str, items: Any) -> tuple[_Override, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise SloConfigError(f"{key}: {list_name}: must be a list")
    out = []
    for i, item in enumerate(items):
        where = f"{list_name}[{i}]"
        if not isinstance(item, dict):
            raise SloConfigError(f"{key}: {where}: must be an object")
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


def parse_slo_config(data: Mapping[str, Any] | None) -> SloConfig:
    """Parse the ConfigMap's ``data`` (None, a missing key or an empty value mean the defaults)."""
    data = data or {}
    colo_doc = _load(COLOCATION_KEY, data.get(COLOCATION_KEY))
    colo_nodes = _overrides(ColocationStrategy, COLOCATION_KEY, "nodeConfigs", colo_doc.get("nodeConfigs"))
    cluster = {k: v for k, v in colo_doc.items() if k != "nodeConfigs"}
    colo = _fields(ColocationStrategy, COLOCATION_KEY, "", cluster)
    thr_doc = _load(THRESHOLD_KEY, data.get(THRESHOLD_KEY))
    thr = _fields(ThresholdStrategy, THRESHOLD_KEY, "clusterStrategy", thr_doc.get("clusterStrategy") or {})
    _check_watermarks(THRESHOLD_KEY, "clusterStrategy.", thr)
    thr_nodes = _overrides(ThresholdStrategy, THRESHOLD_KEY, "nodeStrategies", thr_doc.get("nodeStrategies"))
    for i, o in enumerate(thr_nodes):
        _check_watermarks(THRESHOLD_KEY, f"nodeStrategies[{i}].", {**thr, **o.fields})
    return SloConfig(colo, colo_nodes, thr, thr_nodes)


DEFAULT_CONFIG = parse_slo_config(None)


class ConfigTracker:
    """Keeps the last good config; each distinct problem is returned once (to log and to record)."""

    def __init__(self) -> None:
        self.config: SloConfig = DEFAULT_CONFIG
        self.error: str | None = None
        self._seen: Any = object()

    def update(self, data: Mapping[str, Any] | None) -> str | None:
        """Feed the ConfigMap's current data; returns a new problem to report, else None."""
        if data == self._seen:
            return None
        # Remembered only once parsed or refused: a data the parser crashed on is tried again next time.
        seen = dict(data) if data is not None else None
        try:
            self.config = parse_slo_config(data)
        except SloConfigError as exc:
            self._seen = seen
            message = f"{exc}; keeping the last good configuration"
            if message == self.error:
                return None
            self.error = message
            return message
        self._seen = seen
        self.error = None
        return None
