"""Label selectors (webhook/core/selectors.py): the compiled form agrees with plain matching; how one is described."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.selectors import compile_selector, describe_selector, matches


@pytest.mark.parametrize("selector,labels", [
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]}, {"a": "1"}),
    ({"matchExpressions": [{"key": "b", "operator": "In", "values": ["x", "y"]}]}, {"b": "y"}),
    ({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}, {"b": "y"}),
    ({"matchExpressions": [{"key": "b", "operator": "Exists"}]}, {}),
])
def test_compiled_selector_agrees_with_matches(selector: dict[str, Any], labels: dict[str, str]) -> None:
    compiled = compile_selector(selector)
    assert compiled is not None and compiled.matches(labels) == matches(selector, labels)


def test_describe_selector() -> None:
    assert describe_selector({"matchLabels": {"a": "1"}, "matchExpressions": [
        {"key": "t", "operator": "In", "values": ["x", "y"]}, {"key": "z", "operator": "DoesNotExist"}]}) == \
        "a=1,t in (x,y),!z"
    assert describe_selector(None) == "<everything>"
