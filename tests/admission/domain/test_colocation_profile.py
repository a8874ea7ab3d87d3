"""Matching compiled profiles (webhook/admission/domain/colocation_profile.py): the suffixes later profiles append,
and the indexed selection against plain selector matching."""

from __future__ import annotations

from webhook.admission.domain.colocation_profile import ProfileSet, suffix_tails
from webhook.cluster.profiles import compile_profile
from webhook.core.selectors import matches


def test_suffix_tails() -> None:
    ps = [compile_profile({"metadata": {"name": n}, "spec": {"labelSuffixes": s}})
          for n, s in (("a", {"k": "-a"}), ("b", {"k": "-b", "j": "-j"}), ("c", {"k": "-c"}))]
    assert suffix_tails(ps) == [{"k": "-b-c", "j": "-j"}, {"k": "-c"}, {}]


def test_indexed_selection_agrees_with_plain_matching() -> None:
    selectors = [None, {"matchLabels": {"a": "1"}}, {"matchLabels": {"a": "1", "b": "2"}},
                 {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]},
                 {"matchExpressions": [{"key": "b", "operator": "Exists"}, {"key": "a", "operator": "NotIn",
                                                                            "values": ["1"]}]},
                 {"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]},
                 {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["3"]}]}]
    objs = [{"metadata": {"name": f"p{i}"}, "spec": {"selector": s}} for i, s in enumerate(selectors)]
    view = ProfileSet([compile_profile(o) for o in objs]).for_namespace("ns", {})
    for labels in ({}, {"a": "1"}, {"a": "3", "b": "2"}, {"a": "1", "b": "2", "c": ""}, {"b": "x"}):
        expected = [i for i, s in enumerate(selectors) if matches(s, labels)]
        assert view.select(labels, 0) == expected, labels
