"""The batch conversion caches must never answer one input with another's result."""

from __future__ import annotations

import copy
import datetime
import math

import pytest

from webhook.core import batch_resources
from webhook.core.batch_resources import _convert_resources, canonical, convert_resources
from webhook.core.quantity import QuantityError

TARGETS = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")

# Values that compare or serialize alike in some way: 1 == 1.0 == True, NaN and None both write as
# JSON null, a date writes as a JSON string.
LOOKALIKES = ["1", 1, 1.0, True, None, math.nan, "2024-01-01", datetime.date(2024, 1, 1), "1Gi", {"x": 1}, [1], "x" * 600]


def _same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down (NaN equal to itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))  # type: ignore[arg-type]
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    return a == b


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_convert_resources_cache_keeps_lookalikes_apart(order: str) -> None:
    batch_resources._RESOURCES.clear()
    values = LOOKALIKES if order == "forward" else LOOKALIKES[::-1]
    cases = []
    for v in values:
        cases += [{"requests": {"cpu": v}}, {"limits": {"memory": v, "cpu": "1"}}, {"requests": v, "limits": {"cpu": "2"}}]
    for resources in cases * 2:  # the second round answers from the cache where it can
        expected = _convert_resources(copy.deepcopy(resources), *TARGETS)
        got = convert_resources(resources, *TARGETS)
        assert _same(got, expected), resources


def test_convert_resources_hit_gives_fresh_maps() -> None:
    resources = {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpu"}]}
    first, _ = convert_resources(resources, *TARGETS)
    first["requests"]["kubernetes.io/batch-cpu"] = "changed by a caller"
    second, done = convert_resources(resources, *TARGETS)
    assert second["requests"] == {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1073741824"}
    assert second["claims"] is resources["claims"]  # untouched keys as they were, as without the cache
    assert done == ["requests.cpu", "limits.cpu", "limits.memory", "requests.kubernetes.io/batch-memory = limit"]


def test_canonical_errors_and_cache() -> None:
    assert canonical("1000") == canonical("1000") == "1k"
    for bad in ({"x": 1}, [1], "abc", math.nan, math.inf):
        with pytest.raises(QuantityError):
            canonical(bad)
    assert canonical(1.5) == "1500m"  # a JSON number reads as its text, as in Go
