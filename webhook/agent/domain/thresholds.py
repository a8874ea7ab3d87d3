"""kubelet-style eviction thresholds: parsing (kubelet syntax and error texts) and the pass logic.

Follows the kubelet's ``pkg/kubelet/eviction`` (``helpers.go``, ``eviction_manager.go``): LessThan is strict,
percentages are float32, minimum reclaim is enforced while a threshold stays unresolved, soft thresholds wait for
their grace period, and the pressure condition lingers for the transition period.

One engine serves both programs' memory rules: the Koordinator percentage watermark is expressed
as a hard ``memory.available`` threshold (met at equality) whose minimum reclaim reaches the lower
watermark (``watermark_threshold``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from webhook.agent.domain.durations import DurationError, parse_duration
from webhook.core.quantity import QuantityError, canonical, format_binary_si, parse_quantity

MEMORY_AVAILABLE = "memory.available"
ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
# Every signal the kubelet accepts (api/types.go); only memory.available is observed by the agent.
SIGNALS = (
    MEMORY_AVAILABLE, "nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree",
    "containerfs.available", "containerfs.inodesFree", ALLOCATABLE_MEMORY_AVAILABLE, "pid.available",
)
MEMORY_SIGNALS = (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE)
KUBELET, WATERMARK = "kubelet", "watermark"
DEFAULT_PRESSURE_TRANSITION_PERIOD = 300.0  # kubelet default 5m


class ThresholdError(ValueError):
    """A threshold flag the kubelet would refuse; the message is the kubelet's.

    ``flag`` is the flag whose value is wrong, where the kubelet's text does not name it itself (the CLI
    prefixes it: ``--eviction-hard: quantities must match ...``); pflag's texts already name their flag.
    """

    def __init__(self, message: str, flag: str | None = None) -> None:
        super().__init__(message)
        self.flag = flag

    def with_flag(self) -> str:
        return f"{self.flag}: {self}" if self.flag else str(self)


@contextmanager
def _flag(name: str) -> Iterator[None]:
    """Errors raised inside are about the value of flag ``name``."""
    try:
        yield
    except ThresholdError as exc:
        raise ThresholdError(str(exc), name) from None


def _f32(x: float) -> float:
    value: float = struct.unpack("f", struct.pack("f", x))[0]
    return value


@dataclass(frozen=True, slots=True)
class ThresholdValue:
    """One of: an exact quantity, a float32 fraction of capacity (kubelet ``N%``), an exact fraction."""

    quantity: Decimal | None = None
    percentage: float | None = None
    fraction: Fraction | None = None
    text: str = ""

    def of(self, capacity: int) -> Fraction:
        """The threshold in bytes for a signal with this capacity (kubelet ``GetThresholdQuantity``)."""
        if self.quantity is not None:
            return Fraction(self.quantity)
        if self.percentage is not None:
            return Fraction(int(float(capacity) * self.percentage))  # float64 product, truncated to int64
        assert self.fraction is not None
        return capacity * self.fraction

    def display(self, capacity: int) -> str:
        """As ``Quantity.String()`` prints it in the kubelet's eviction message."""
        if self.quantity is not None:
            return canonical(self.text)
        return format_binary_si(math.ceil(self.of(capacity)))


@dataclass(frozen=True, slots=True)
class Threshold:
    signal: str
    value: ThresholdValue
    grace_period: float = 0.0            # seconds; 0 means hard
    min_reclaim: ThresholdValue | None = None
    strict: bool = True                  # kubelet LessThan; the watermark is met at equality
    source: str = KUBELET

    @property
    def hard(self) -> bool:
        return self.grace_period == 0

    def describe(self) -> str:
        return f"{self.signal}<{self.value.text}" if self.source == KUBELET else f"memory usage >= {self.value.text}"


@dataclass(frozen=True, slots=True)
class Observation:
    """A signal's observed value: bytes available and the capacity percentages refer to."""

    available: int
    capacity: int


# -- parsing (pkg/kubelet/eviction/helpers.go) --------------------------------------------------------
def _pairs(flag: str, raw: str | None, sep: str) -> dict[str, str]:
    """cliflag MapStringString / LangleSeparatedMapStringString: ``k<v,k<v`` or ``k=v,k=v``."""
    out: dict[str, str] = {}
    if not raw:
        return out
    for part in raw.split(","):
        if not part:
            continue
        kv = part.split(sep, 1)
        if len(kv) != 2:
            raise ThresholdError(
                f'invalid argument "{raw}" for "{flag}" flag: malformed pair, expect string{sep}string')
        out[kv[0].strip()] = kv[1].strip()
    return out


def _percentage(val: str) -> float:
    text = val.rstrip("%")
    try:
        value = float(text)
    except ValueError:
        raise ThresholdError(f'strconv.ParseFloat: parsing "{text}": invalid syntax') from None
    if math.isinf(value) or abs(value) > 3.4028234663852886e38:
        raise ThresholdError(f'strconv.ParseFloat: parsing "{text}": value out of range')
    return _f32(_f32(value) / _f32(100.0))


def _quantity(val: str) -> Decimal:
    try:
        return parse_quantity(val)
    except QuantityError as exc:
        raise ThresholdError(str(exc)) from None


def _check_signal(signal: str) -> None:
    if signal not in SIGNALS:
        raise ThresholdError(f"unsupported eviction signal {signal}")


def _statement(signal: str, val: str) -> ThresholdValue | None:
    _check_signal(signal)
    if val.endswith("%"):
        if val in ("0%", "100%"):
            return None  # the kubelet ignores these
        pct = _percentage(val)
        if pct < 0:
            raise ThresholdError(f"eviction percentage threshold {signal} must be >= 0%: {val}")
        if pct > 1:
            raise ThresholdError(f"eviction percentage threshold {signal} must be <= 100%: {val}")
        return ThresholdValue(percentage=pct, text=val)
    q = _quantity(val)
    if q <= 0:
        raise ThresholdError(f"eviction threshold {signal} must be positive: {canonical(val)}")
    return ThresholdValue(quantity=q, text=val)


def _min_reclaim(signal: str, val: str) -> ThresholdValue:
    _check_signal(signal)
    if val.endswith("%"):
        pct = _percentage(val)
        if pct <= 0:
            raise ThresholdError(f"eviction percentage minimum reclaim {signal} must be positive: {val}")
        return ThresholdValue(percentage=pct, text=val)
    q = _quantity(val)
    if q < 0:
        raise ThresholdError(f"negative eviction minimum reclaim specified for {signal}")
    return ThresholdValue(quantity=q, text=val)


def parse_thresholds(hard: str | None = None, soft: str | None = None, soft_grace_period: str | None = None,
                     minimum_reclaim: str | None = None) -> list[Threshold]:
    """kubelet ``ParseThresholdConfig`` over the flag strings; raises ThresholdError with its text."""
    hard_map = _pairs("--eviction-hard", hard, "<")
    soft_map = _pairs("--eviction-soft", soft, "<")
    grace_map = _pairs("--eviction-soft-grace-period", soft_grace_period, "=")
    reclaim_map = _pairs("--eviction-minimum-reclaim", minimum_reclaim, "=")
    with _flag("--eviction-hard"):
        hard_values = {s: v for s, v in ((s, _statement(s, raw)) for s, raw in sorted(hard_map.items())) if v}
    with _flag("--eviction-soft"):
        soft_values = {s: v for s, v in ((s, _statement(s, raw)) for s, raw in sorted(soft_map.items())) if v}
    graces: dict[str, float] = {}
    with _flag("--eviction-soft-grace-period"):
        for signal, raw in sorted(grace_map.items()):
            _check_signal(signal)
            try:
                period = parse_duration(raw)
            except DurationError as exc:
                raise ThresholdError(str(exc)) from None
            if period < 0:
                raise ThresholdError(f"invalid eviction grace period specified: {raw}, must be a positive value")
            graces[signal] = period
    with _flag("--eviction-minimum-reclaim"):
        reclaims = {s: _min_reclaim(s, raw) for s, raw in sorted(reclaim_map.items())}
    out = [Threshold(s, v, 0.0, reclaims.get(s)) for s, v in hard_values.items()]
    for signal, value in soft_values.items():
        if signal not in graces:
            raise ThresholdError(f"grace period must be specified for the soft eviction threshold {signal}",
                                 "--eviction-soft-grace-period")
        out.append(Threshold(signal, value, graces[signal], reclaims.get(signal)))
    return out


def parse_transition_period(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_PRESSURE_TRANSITION_PERIOD
    try:
        return parse_duration(raw)
    except DurationError as exc:
        flag = "--eviction-pressure-transition-period"
        raise ThresholdError(f'invalid argument "{raw}" for "{flag}" flag: {exc}') from None


def watermark_threshold(threshold_percent: int, lower_percent: int) -> Threshold:
    """Koordinator's ``used >= capacity × threshold%`` then free to ``used <= capacity × lower%``, exactly.

    With available = capacity − used: met when available <= capacity × (100 − threshold)%, resolved when
    available >= capacity × (100 − lower)% (the minimum reclaim is the gap between the two watermarks).
    """
    return Threshold(
        MEMORY_AVAILABLE,
        ThresholdValue(fraction=Fraction(100 - threshold_percent, 100), text=f"{threshold_percent}%"),
        0.0,
        ThresholdValue(fraction=Fraction(threshold_percent - lower_percent, 100), text=f"{lower_percent}%"),
        strict=False, source=WATERMARK,
    )


# -- one pass (eviction_manager.go synchronize) -------------------------------------------------------
def is_met(t: Threshold, obs: Observation, enforce_min_reclaim: bool) -> bool:
    quantity = t.value.of(obs.capacity)
    if enforce_min_reclaim and t.min_reclaim is not None:
        # Still unresolved until available reaches threshold + minimum reclaim (strict for both kinds).
        return quantity + t.min_reclaim.of(obs.capacity) > obs.available
    return quantity > obs.available or (not t.strict and quantity == obs.available)


def met_at_used(t: Threshold, capacity: int) -> int:
    """The smallest node usage (capacity − available, bytes) at which ``t`` is met (``is_met`` inverted)."""
    edge = capacity - t.value.of(capacity)       # available == quantity  <=>  used == edge
    return math.floor(edge) + 1 if t.strict else math.ceil(edge)


def amount_to_free(t: Threshold, obs: Observation) -> int:
    """Whole bytes to release so the threshold, with its minimum reclaim, is resolved."""
    target = t.value.of(obs.capacity) + (t.min_reclaim.of(obs.capacity) if t.min_reclaim else 0)
    return max(0, math.ceil(target - obs.available))


@dataclass(frozen=True, slots=True)
class EngineState:
    met: tuple[Threshold, ...] = ()                                  # acting thresholds of the last pass
    first_observed: Mapping[Threshold, float] = field(default_factory=dict)
    pressure_last_observed: float | None = None


@dataclass(frozen=True, slots=True)
class PassResult:
    observed: tuple[Threshold, ...]   # met now, grace periods ignored (minimum reclaim enforced for old ones)
    acting: tuple[Threshold, ...]     # grace period elapsed: these drive eviction
    pressure: bool                    # the BEMemoryPressure condition
    state: EngineState


def evaluate(thresholds: Iterable[Threshold], observations: Mapping[str, Observation], state: EngineState,
             now: float, transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD) -> PassResult:
    """One kubelet synchronize pass over ``thresholds``; signals without an observation are never met."""
    observed: list[Threshold] = []
    in_force = tuple(thresholds)
    for t in in_force:
        obs = observations.get(t.signal)
        if obs is not None and is_met(t, obs, False):
            observed.append(t)
    # The kubelet keeps a threshold met until its minimum reclaim is released; its thresholds never change while it
    # runs, ours do (slo-controller-config): one no longer in force is dropped, or a watermark lowered for a while
    # and put back would go on evicting BE pods under the value that replaced it.
    for t in state.met:
        obs = observations.get(t.signal)
        if t in in_force and t not in observed and obs is not None and is_met(t, obs, True):
            observed.append(t)
    first = {t: state.first_observed.get(t, now) for t in observed}
    last_pressure = state.pressure_last_observed
    if any(t.signal in MEMORY_SIGNALS for t in observed):
        last_pressure = now
    pressure = last_pressure is not None and now - last_pressure < transition_period
    acting = tuple(t for t in observed if now - first[t] >= t.grace_period)
    return PassResult(tuple(observed), acting, pressure, EngineState(acting, first, last_pressure))


def node_low_message(resource: str, t: Threshold, obs: Observation) -> str:
    """The kubelet's Evicted message head, with its trailing space."""
    return (f"The node was low on resource: {resource}. Threshold quantity: {t.value.display(obs.capacity)}, "
            f"available: {format_binary_si(obs.available)}. ")
