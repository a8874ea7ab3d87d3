"""A ClusterColocationProfile judged as it enters the state (webhook/cluster/profiles.py): the probability, and
what the profile would write that the apiserver refuses on a pod, in upstream's texts."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.cluster.profiles import ProfileError, compile_profile, parse_probability


@pytest.mark.parametrize("value,percent", [(None, 100), (0, 0), (50, 50), ("50%", 50), ("100%", 100), ("0%", 0),
                                           (100, 100)])
def test_parse_probability(value: object, percent: int) -> None:
    assert parse_probability(value) == percent


PERCENT_TEXT = ("a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
                "regex used for validation is '[0-9]+%')")
BAD_PROBABILITIES = [
    # (name, value, the whole reason the profile is refused); before: 150 and 250 were applied as 100 %
    ("over 100", 150, "spec.probability: Invalid value: 150: must be between 0 and 100, inclusive"),
    ("far over 100", 250, "spec.probability: Invalid value: 250: must be between 0 and 100, inclusive"),
    ("a percentage over 100", "150%", 'spec.probability: Invalid value: "150%": must be between 0 and 100, inclusive'),
    ("negative", -1, "spec.probability: Invalid value: -1: must be between 0 and 100, inclusive"),
    ("a number as text", "50", f'spec.probability: Invalid value: "50": {PERCENT_TEXT}'),
    ("a fraction as text", "50.5%", f'spec.probability: Invalid value: "50.5%": {PERCENT_TEXT}'),
    ("a word", "abc", f'spec.probability: Invalid value: "abc": {PERCENT_TEXT}'),
    ("a boolean", True, "spec.probability: Invalid value: true: must be an integer or percentage (e.g '5%')"),
    ("a fraction", 0.5, "spec.probability: Invalid value: 0.5: must be an integer or percentage (e.g '5%')"),
    ("a list", [50], "spec.probability: Invalid value: [50]: must be an integer or percentage (e.g '5%')"),
]


@pytest.mark.parametrize("name,value,error", BAD_PROBABILITIES, ids=[c[0] for c in BAD_PROBABILITIES])
def test_bad_probability_refuses_the_profile(name: str, value: object, error: str) -> None:
    with pytest.raises(ProfileError) as exc:
        parse_probability(value)
    assert str(exc.value) == error
    assert compile_profile({"metadata": {"name": "x"}, "spec": {"probability": value}}).error == error


KEY_TEXT = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
VALUE_TEXT = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
              "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
              "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                  "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
                  "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
PREFIX_TEXT = "prefix part " + SUBDOMAIN_TEXT
REFUSED_OUTPUT = [
    # (name, spec, the whole reason): what the apiserver would refuse on every pod the profile matched
    ("label key with a space", {"labels": {"my key": "v"}}, f'spec.labels[my key]: Invalid value: "my key": {KEY_TEXT}'),
    ("label key with a bad prefix", {"labels": {"Example.com/a": "v"}},
     f'spec.labels[Example.com/a]: Invalid value: "Example.com/a": {PREFIX_TEXT}'),
    ("label key with an empty prefix", {"labels": {"/a": "v"}},
     'spec.labels[/a]: Invalid value: "/a": prefix part must be non-empty'),
    ("label key name over 63 bytes", {"labels": {"a" * 64: "v"}},
     f'spec.labels[{"a" * 64}]: Invalid value: "{"a" * 64}": name part must be no more than 63 bytes'),
    ("label value with a space", {"labels": {"team": "a b"}}, f'spec.labels[team]: Invalid value: "a b": {VALUE_TEXT}'),
    ("label value over 63 bytes", {"labels": {"team": "v" * 64}},
     f'spec.labels[team]: Invalid value: "{"v" * 64}": must be no more than 63 bytes'),
    ("annotation key with a space", {"annotations": {"a b": "x"}},
     f'spec.annotations[a b]: Invalid value: "a b": {KEY_TEXT}'),
    ("label key mapping to a bad key", {"labelKeysMapping": {"old": "new key"}},
     f'spec.labelKeysMapping[old]: Invalid value: "new key": {KEY_TEXT}'),
    ("annotation key mapping to a bad key", {"annotationKeysMapping": {"old": "a/b/c"}},
     'spec.annotationKeysMapping[old]: Invalid value: "a/b/c": a valid label key must consist of alphanumeric '
     "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
     "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an "
     "optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ("a suffix that ends a value badly", {"labelSuffixes": {"app": "-"}},
     f'spec.labelSuffixes[app]: Invalid value: "-": {VALUE_TEXT}'),
    ("a suffix with a bad character", {"labelSuffixes": {"app": "-v!2"}},
     f'spec.labelSuffixes[app]: Invalid value: "-v!2": {VALUE_TEXT}'),
    ("a suffix no value leaves room for", {"labelSuffixes": {"app": "x" * 63}},
     f'spec.labelSuffixes[app]: Invalid value: "{"x" * 63}": must be no more than 63 bytes'),
    ("priorityClassName not a DNS subdomain", {"priorityClassName": "Koord_Batch"},
     f'spec.priorityClassName: Invalid value: "Koord_Batch": {SUBDOMAIN_TEXT}'),
    ("schedulerName not a DNS subdomain", {"schedulerName": "My Scheduler"},
     f'spec.schedulerName: Invalid value: "My Scheduler": {SUBDOMAIN_TEXT}'),
    ("a negative koordinatorPriority is no label value", {"koordinatorPriority": -5},
     f"spec.koordinatorPriority: Invalid value: -5: {VALUE_TEXT}"),
    ("a patch writing a bad label value", {"patch": {"metadata": {"labels": {"x": "a b"}}}},
     f'spec.patch.metadata.labels[x]: Invalid value: "a b": {VALUE_TEXT}'),
    ("a patch writing a bad annotation key", {"patch": {"metadata": {"annotations": {"a b": "x"}}}},
     f'spec.patch.metadata.annotations[a b]: Invalid value: "a b": {KEY_TEXT}'),
    ("a patch writing a bad schedulerName", {"patch": {"spec": {"schedulerName": "A"}}},
     f'spec.patch.spec.schedulerName: Invalid value: "A": {SUBDOMAIN_TEXT}'),
]
VALID_OUTPUT = [
    ("prefixed keys, empty and dotted values", {"labels": {"koordinator.sh/x": "", "a.b_c-d": "v1.2_3-x"}}),
    ("annotation keys are checked lower-cased", {"annotations": {"Example.COM/Key": "any value at all"}}),
    ("a suffix that ends a value well", {"labelSuffixes": {"app": "-v2"}}),
    ("a patch deleting a label", {"patch": {"metadata": {"labels": {"x": None}}}}),
    ("names as the apiserver takes them", {"priorityClassName": "koord-batch", "schedulerName": "koord-scheduler",
                                           "koordinatorPriority": 1000}),
]


@pytest.mark.parametrize("name,spec,error", REFUSED_OUTPUT, ids=[c[0] for c in REFUSED_OUTPUT])
def test_output_the_apiserver_refuses_refuses_the_profile(name: str, spec: dict[str, Any], error: str) -> None:
    assert compile_profile({"metadata": {"name": "x"}, "spec": spec}).error == error


@pytest.mark.parametrize("name,spec", VALID_OUTPUT, ids=[c[0] for c in VALID_OUTPUT])
def test_output_the_apiserver_takes_is_kept(name: str, spec: dict[str, Any]) -> None:
    assert compile_profile({"metadata": {"name": "x"}, "spec": spec}).error is None


@pytest.mark.parametrize("spec,error", [
    ({"labels": {"a": 1}}, "labels: must be a map of strings"),
    ({"koordinatorPriority": "high"}, "koordinatorPriority: must be a 32-bit integer"),
    ({"patch": "x"}, "patch: must be an object"),
    ({"patch": {"metadata": {"namespace": "x"}}}, "patch.metadata.namespace: a profile may not change"),
    ({"selector": {"matchLabels": {"a": 1}}}, "selector.matchLabels[a]: value must be a string"),
    ({"schedulerName": 3}, "schedulerName: must be a string"),
])
def test_bad_profiles_never_match(spec: dict[str, Any], error: str) -> None:
    p = compile_profile({"metadata": {"name": "x"}, "spec": spec})
    assert p.error is not None and error in p.error
