"""kubelet-style thresholds: parsing (kubelet texts), float32 arithmetic, hysteresis, grace, condition."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from webhook.agent.domain.durations import DurationError, parse_duration
from webhook.agent.domain.thresholds import (
    MEMORY_AVAILABLE,
    EngineState,
    Observation,
    ThresholdError,
    amount_to_free,
    evaluate,
    is_met,
    node_low_message,
    parse_thresholds,
    parse_transition_period,
    watermark_threshold,
)

GI, MI = 2**30, 2**20


@pytest.mark.parametrize("name,flags,error", [
    ("unknown signal", dict(hard="mem.available<1Gi"), "unsupported eviction signal mem.available"),
    ("unknown signal foo", dict(hard="invalid.foo<1Gi"), "unsupported eviction signal invalid.foo"),
    ("negative quantity", dict(hard="memory.available<-1Mi"), "eviction threshold memory.available must be positive: -1Mi"),
    ("zero quantity", dict(hard="memory.available<0"), "eviction threshold memory.available must be positive: 0"),
    ("negative percent", dict(hard="memory.available<-5%"), "eviction percentage threshold memory.available must be >= 0%: -5%"),
    ("over 100 percent", dict(hard="memory.available<150%"), "eviction percentage threshold memory.available must be <= 100%: 150%"),
    ("bad percent", dict(hard="memory.available<abc%"), 'strconv.ParseFloat: parsing "abc": invalid syntax'),
    ("bad quantity", dict(hard="memory.available<1Gx"), "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ("no operator", dict(hard="memory.available"), 'invalid argument "memory.available" for "--eviction-hard" flag: malformed pair, expect string<string'),
    ("soft without grace", dict(soft="memory.available<1Gi"), "grace period must be specified for the soft eviction threshold memory.available"),
    ("negative grace", dict(soft="memory.available<1Gi", soft_grace_period="memory.available=-30s"), "invalid eviction grace period specified: -30s, must be a positive value"),
    ("bad grace", dict(soft="memory.available<1Gi", soft_grace_period="memory.available=soon"), 'time: invalid duration "soon"'),
    ("grace no pair", dict(soft_grace_period="memory.available"), 'invalid argument "memory.available" for "--eviction-soft-grace-period" flag: malformed pair, expect string=string'),
    ("min reclaim 0%", dict(minimum_reclaim="memory.available=0%"), "eviction percentage minimum reclaim memory.available must be positive: 0%"),
    ("min reclaim negative", dict(minimum_reclaim="memory.available=-1Mi"), "negative eviction minimum reclaim specified for memory.available"),
    ("min reclaim signal", dict(minimum_reclaim="memory.free=1Mi"), "unsupported eviction signal memory.free"),
])
def test_parse_errors_are_the_kubelets(name: str, flags: dict[str, Any], error: str) -> None:
    with pytest.raises(ThresholdError) as exc:
        parse_thresholds(**flags)
    assert str(exc.value) == error


@pytest.mark.parametrize("flags,shown", [
    (dict(hard="memory.available<1Gx"), "--eviction-hard: quantities must match"),
    (dict(soft="mem.available<1Gi"), "--eviction-soft: unsupported eviction signal mem.available"),
    (dict(soft="memory.available<1Gi"), "--eviction-soft-grace-period: grace period must be specified"),
    (dict(soft_grace_period="memory.available=-1s"), "--eviction-soft-grace-period: invalid eviction grace period"),
    (dict(minimum_reclaim="memory.available=0%"), "--eviction-minimum-reclaim: eviction percentage minimum reclaim"),
    # pflag's own text already names its flag: no second prefix
    (dict(hard="memory.available"), 'invalid argument "memory.available" for "--eviction-hard" flag'),
])
def test_errors_name_their_flag(flags: dict[str, Any], shown: str) -> None:
    with pytest.raises(ThresholdError) as exc:
        parse_thresholds(**flags)
    assert exc.value.with_flag().startswith(shown)
    assert not str(exc.value).startswith("--")  # the kubelet's own text is unchanged


def test_kubelet_flag_examples_parse() -> None:
    ts = parse_thresholds(hard="memory.available<10%", soft="memory.available<1Gi",
                          soft_grace_period="memory.available=1m30s",
                          minimum_reclaim="memory.available=0Mi,nodefs.available=500Mi,imagefs.available=2Gi")
    hard, soft = ts
    assert hard.hard and hard.value.percentage is not None
    assert soft.grace_period == 90.0 and not soft.hard
    assert soft.min_reclaim is not None and soft.min_reclaim.of(0) == 0


@pytest.mark.parametrize("name,value,capacity,expected", [
    ("float32 10% of 10Gi", "10%", 10 * GI, 1073741840),   # the kubelet's float32 percentage (pkg/kubelet/eviction/helpers.go), not 1073741824
    ("quantity", "500Mi", 10 * GI, 500 * MI),
    ("5% of 32Gi", "5%", 32 * GI, int(float(32 * GI) * 0.05000000074505806)),
])
def test_threshold_quantity(name: str, value: str, capacity: int, expected: int) -> None:
    (t,) = parse_thresholds(hard=f"memory.available<{value}")
    assert t.value.of(capacity) == expected


@pytest.mark.parametrize("value", ["0%", "100%"])
def test_zero_and_hundred_percent_are_ignored(value: str) -> None:
    assert parse_thresholds(hard=f"memory.available<{value}") == []


@pytest.mark.parametrize("name,available,enforce,expected", [
    ("below: met", 500 * MI - 1, False, True),
    ("equal: LessThan is strict", 500 * MI, False, False),
    ("above", 600 * MI, False, False),
    ("hysteresis: under threshold+minReclaim", 550 * MI, True, True),
    ("hysteresis: at threshold+minReclaim is resolved", 600 * MI, True, False),
])
def test_less_than_is_strict(name: str, available: int, enforce: bool, expected: bool) -> None:
    (t,) = parse_thresholds(hard="memory.available<500Mi", minimum_reclaim="memory.available=100Mi")
    assert is_met(t, Observation(available, 10 * GI), enforce) is expected


@pytest.mark.parametrize("name,used_percent,met", [
    ("70% triggers at equality", Fraction(70), True),
    ("just below 70%", Fraction(6999, 100), False),
    ("above", Fraction(75), True),
])
def test_watermark_is_met_at_equality(name: str, used_percent: Fraction, met: bool) -> None:
    cap = 100 * GI
    used = int(cap * used_percent / 100)
    assert is_met(watermark_threshold(70, 68), Observation(cap - used, cap), False) is met


@pytest.mark.parametrize("name,capacity,used,threshold,lower,need", [
    ("frees down to lower exactly", 32 * GI, int(32 * GI * 0.75), 70, 68, int(32 * GI * 0.75) - int(32 * GI * 68 / 100)),
    ("fractional watermark rounds the need up", 1000, 701, 70, 68, 21),
    # Exact, not Koordinator's floored percentage: 70.9% of 1000 with lower 68 needs 29, not 20.
    ("no flooring of usage%", 1000, 709, 70, 68, 29),
])
def test_watermark_amount(name: str, capacity: int, used: int, threshold: int, lower: int, need: int) -> None:
    assert amount_to_free(watermark_threshold(threshold, lower), Observation(capacity - used, capacity)) == need


def test_kubelet_amount_includes_min_reclaim() -> None:
    (t,) = parse_thresholds(hard="memory.available<1Gi", minimum_reclaim="memory.available=512Mi")
    assert amount_to_free(t, Observation(GI - 100, 8 * GI)) == 512 * MI + 100


def test_grace_period_hysteresis_and_transition() -> None:
    (hard,) = parse_thresholds(hard="memory.available<1Gi", minimum_reclaim="memory.available=1Gi")
    (soft,) = parse_thresholds(soft="memory.available<2Gi", soft_grace_period="memory.available=30s")
    ts = [hard, soft]
    low = {MEMORY_AVAILABLE: Observation(int(1.5 * GI), 8 * GI)}   # soft met only
    state = EngineState()
    r = evaluate(ts, low, state, now=0.0, transition_period=300)
    assert r.observed == (soft,) and r.acting == () and r.pressure   # condition ignores grace periods
    r = evaluate(ts, low, r.state, now=29.0, transition_period=300)
    assert r.acting == ()
    r = evaluate(ts, low, r.state, now=30.0, transition_period=300)
    assert r.acting == (soft,)
    very_low = {MEMORY_AVAILABLE: Observation(GI - 1, 8 * GI)}
    r = evaluate(ts, very_low, r.state, now=31.0, transition_period=300)
    assert set(r.acting) == {hard, soft}
    # Back above the hard threshold but under threshold + minimum reclaim: still acting.
    mid = {MEMORY_AVAILABLE: Observation(int(1.9 * GI), 8 * GI)}
    r = evaluate(ts, mid, r.state, now=32.0, transition_period=300)
    assert hard in r.acting
    fine = {MEMORY_AVAILABLE: Observation(4 * GI, 8 * GI)}
    r = evaluate(ts, fine, r.state, now=33.0, transition_period=300)
    assert r.acting == () and r.pressure          # the condition lingers for the transition period
    r = evaluate(ts, fine, r.state, now=32.0 + 300, transition_period=300)
    assert not r.pressure
    # A soft threshold seen again starts its grace period afresh.
    r = evaluate(ts, low, r.state, now=400.0, transition_period=300)
    assert r.acting == () and r.pressure


def test_a_watermark_no_longer_in_force_stops_acting() -> None:
    """Found on a real node (tests/e2e/test_real_node.py): a watermark lowered below the node's usage for a while and
    put back to 99 % went on acting, as a met threshold stays met until its reclaim is done, and evicted every BE pod
    that came after. The kubelet's thresholds never change while it runs; slo-controller-config's do."""
    used = {MEMORY_AVAILABLE: Observation(6 * GI, 8 * GI)}            # 25 % used
    lowered, back = watermark_threshold(20, 18), watermark_threshold(99, 97)
    r = evaluate([lowered], used, EngineState(), now=0.0)
    assert r.acting == (lowered,)
    r = evaluate([lowered], used, r.state, now=1.0)
    assert r.acting == (lowered,)                                       # still met: still acting
    r = evaluate([back], used, r.state, now=2.0)
    assert r.acting == () and r.observed == ()


def test_unobserved_signal_is_never_met() -> None:
    ts = parse_thresholds(hard="nodefs.available<10%")
    assert evaluate(ts, {MEMORY_AVAILABLE: Observation(0, GI)}, EngineState(), 0.0).observed == ()


@pytest.mark.parametrize("name,hard,capacity,available,message", [
    ("binary quantity", "500Mi", 8 * GI, 400 * MI,
     "The node was low on resource: memory. Threshold quantity: 500Mi, available: 400Mi. "),
    ("percentage", "10%", 10 * GI, 58472 * 1024,
     "The node was low on resource: memory. Threshold quantity: 1073741840, available: 58472Ki. "),
    ("decimal quantity", "1G", 8 * GI, 1536 * MI,
     "The node was low on resource: memory. Threshold quantity: 1G, available: 1536Mi. "),
])
def test_evicted_message(name: str, hard: str, capacity: int, available: int, message: str) -> None:
    (t,) = parse_thresholds(hard=f"memory.available<{hard}")
    assert node_low_message("memory", t, Observation(available, capacity)) == message


@pytest.mark.parametrize("text,seconds", [("1m30s", 90.0), ("5m", 300.0), ("1.5h", 5400.0), ("300ms", 0.3),
                                          ("0", 0.0), ("-2s", -2.0), ("1h2m3s4ms", 3723.004)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,error", [("", 'time: invalid duration ""'), ("10", 'time: missing unit in duration "10"'),
                                        ("3x", 'time: unknown unit "x" in duration "3x"'), ("s", 'time: invalid duration "s"')])
def test_go_duration_errors(text: str, error: str) -> None:
    with pytest.raises(DurationError) as exc:
        parse_duration(text)
    assert str(exc.value) == error


def test_transition_period_flag() -> None:
    assert parse_transition_period(None) == 300.0
    with pytest.raises(ThresholdError, match='for "--eviction-pressure-transition-period" flag: time: invalid duration "x"'):
        parse_transition_period("x")
