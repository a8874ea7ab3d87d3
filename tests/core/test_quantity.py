"""webhook/core/quantity.py: exact at any size (no 28-digit default context anywhere a value passes)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.domain.batch_resources import conversion_notes
from webhook.core.quantity import (
    canonical,
    format_decimal_si,
    int_value,
    is_whole_milli,
    milli_value,
    parse_quantity,
)
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, pod_requests, resource_lists

THIRTY = "123456789012345678901234567890"
# Whole numbers of up to 60 digits (the grammar's own limit is 80 significant digits at nano scale).
big_whole = st.integers(min_value=10**27, max_value=10**60)


def _notes(cpu: str) -> list[str]:
    spec = {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}
    return conversion_notes(resource_lists(spec), {("containers", 0)}, BATCH_CPU, BATCH_MEMORY)


def test_a_thirty_digit_whole_cpu_converts_without_a_rounding_warning() -> None:
    q = parse_quantity(THIRTY)
    assert milli_value(q) == int(THIRTY) * 1000
    assert is_whole_milli(q)
    assert _notes(THIRTY) == []
    assert format_decimal_si(q) == canonical(THIRTY) == THIRTY


@settings(max_examples=200, deadline=None)
@given(big_whole, st.sampled_from(["", "m", "k", "M"]))
def test_whole_values_of_any_size_never_warn(n: int, suffix: str) -> None:
    text = f"{n}{suffix}"
    q = parse_quantity(text)
    assert is_whole_milli(q)
    assert _notes(text) == []
    assert milli_value(q) == n * {"m": 1, "": 10**3, "k": 10**6, "M": 10**9}[suffix]


@settings(max_examples=200, deadline=None)
@given(big_whole, st.integers(min_value=1, max_value=9))
def test_a_sub_milli_fraction_of_a_large_value_still_warns(n: int, tenth: int) -> None:
    text = f"{n}.000{tenth}"
    assert not is_whole_milli(parse_quantity(text))
    assert milli_value(parse_quantity(text)) == n * 1000 + 1
    assert _notes(text) == [f'container "app": requests.cpu "{text}" is not whole milli-cores: batch-cpu '
                            f"{n * 1000 + 1} (rounded up)"]


@settings(max_examples=200, deadline=None)
@given(big_whole, st.booleans())
def test_large_values_format_and_parse_back_exactly(n: int, negative: bool) -> None:
    q = parse_quantity(f"{'-' if negative else ''}{n}")
    assert q == (-n if negative else n)
    assert parse_quantity(format_decimal_si(q)) == q
    assert int_value(q) == q


@settings(max_examples=100, deadline=None)
@given(st.lists(big_whole, min_size=2, max_size=4))
def test_sums_of_large_requests_are_exact(values: list[int]) -> None:
    spec = {"containers": [{"name": f"c{i}", "resources": {"requests": {"cpu": str(v)}}}
                           for i, v in enumerate(values)]}
    assert pod_requests({"spec": spec})["cpu"] == Decimal(sum(values))


def test_a_long_negative_fraction_rounds_away_from_zero_at_nano() -> None:
    # -(1n + a tiny part beyond the 80th digit): once, a ceiling at 80 digits dropped the tiny part first.
    assert parse_quantity("-0.0000000010" + "0" * 85 + "1") == Decimal("-2e-9")
