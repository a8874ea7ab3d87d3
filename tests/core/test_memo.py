"""The one memo policy (webhook.core.memo): a memoised function answers every input exactly as without it."""

from __future__ import annotations

import copy
import datetime
import math
from collections.abc import Callable, Sized
from decimal import Decimal
from typing import Any

import pytest

from webhook.admission.domain.batch_resources import bytes_text, convert_resources, milli_cores_text
from webhook.core import memo as memo_module
from webhook.core.memo import MAX_ENTRIES, MAX_TEXT, clear_all, memo
from webhook.core.quantity import QuantityError, canonical, parse_quantity

TARGETS = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")

# Values that compare or serialize alike in some way: 1 == 1.0 == True, NaN and None both write as
# JSON null, a date writes as a JSON string.
LOOKALIKES = ["1", 1, 1.0, True, None, math.nan, "2024-01-01", datetime.date(2024, 1, 1), "1Gi", {"x": 1}, [1], "x" * 600]


class _Text(str):
    """A str subclass: equal and hashed like its text, but not a key of a memo."""


def _same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down (NaN equal to itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)  # of a's type
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple))
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float)
        return math.isnan(b)
    return a == b


def _outcome(fn: Callable[[object], object], raw: object) -> object:
    try:
        return fn(raw)
    except QuantityError as exc:
        return ("QuantityError", str(exc))


@pytest.mark.parametrize("fn", [parse_quantity, canonical, milli_cores_text, bytes_text])
@pytest.mark.parametrize("order", ["forward", "backward"])
def test_lookalikes_never_share_an_answer(fn: Callable[[object], object], order: str) -> None:
    values = LOOKALIKES if order == "forward" else LOOKALIKES[::-1]
    cold = []
    for raw in values:  # each answered with every memo empty
        clear_all()
        cold.append(_outcome(fn, raw))
    clear_all()
    for raw in values:  # every lookalike remembered where the policy allows
        _outcome(fn, raw)
    for raw, expected in zip(values, cold, strict=False):
        assert _same(_outcome(fn, raw), expected), raw


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_convert_resources_keeps_lookalikes_apart(order: str) -> None:
    clear_all()
    values = LOOKALIKES if order == "forward" else LOOKALIKES[::-1]
    cases: list[dict[str, Any]] = []
    for v in values:
        cases += [{"requests": {"cpu": v}}, {"limits": {"memory": v, "cpu": "1"}}, {"requests": v, "limits": {"cpu": "2"}}]
    first = [convert_resources(copy.deepcopy(r), *TARGETS) for r in cases]
    again = [convert_resources(r, *TARGETS) for r in cases]  # answered from warm memos
    assert all(_same(a, b) for a, b in zip(first, again, strict=False))


def test_convert_resources_gives_fresh_maps() -> None:
    resources = {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpu"}]}
    first, _ = convert_resources(resources, *TARGETS)
    first["requests"]["kubernetes.io/batch-cpu"] = "changed by a caller"
    second, done = convert_resources(resources, *TARGETS)
    assert second["requests"] == {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1073741824"}
    assert second["claims"] is resources["claims"]  # untouched keys as they were
    assert done == ["requests.cpu", "limits.cpu", "limits.memory", "requests.kubernetes.io/batch-memory = limit"]


def test_canonical_errors() -> None:
    assert canonical("1000") == canonical("1000") == "1k"
    for bad in ({"x": 1}, [1], "abc", math.nan, math.inf):
        with pytest.raises(QuantityError):
            canonical(bad)
    assert canonical(1.5) == "1500m"  # a JSON number reads as its text, as in Go


def test_the_policy_keys_short_exact_texts_only_and_stays_bounded() -> None:
    calls: list[object] = []

    @memo
    def length(raw: Sized) -> int:
        calls.append(raw)
        if raw == "bad":
            raise ValueError(raw)
        return len(raw)

    assert length("abc") == length("abc") == 3 and calls == ["abc"]
    long = "x" * (MAX_TEXT + 1)
    assert length(long) == length(long) and calls[1:] == [long, long]  # too long to keep
    assert length(_Text("ab")) == 2 and length(_Text("ab")) == 2 and len(calls) == 5  # a subclass is no key
    assert length([1, 2]) == 2 and len(calls) == 6  # not a text: computed, never kept
    for _ in range(2):
        with pytest.raises(ValueError):
            length("bad")
    assert calls.count("bad") == 2  # a failure is never remembered
    for i in range(MAX_ENTRIES + 10):
        length(str(i))
    assert len(length.entries) <= MAX_ENTRIES
    clear_all()
    assert length.entries == {} and all(m.entries == {} for m in memo_module._ALL)


def test_every_memo_of_the_hot_path_is_registered() -> None:
    """The memos bench/memo.py measures: each one is worth its place (docs/benchmarks.md)."""
    names = {m.__name__ for m in memo_module._ALL}
    assert {"_parse", "canonical", "milli_cores_text", "bytes_text"} <= names
    assert parse_quantity("1Gi") == Decimal(2**30)
