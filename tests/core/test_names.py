"""webhook.core.names: apimachinery's qualified-name, label-value and DNS-name checks, against the cases of its own
test table (util/validation/validation_test.go) and its texts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from webhook.core.names import dns1035_label, dns1123_label, dns1123_subdomain, label_value, qualified_name

GOOD_QUALIFIED = ["simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
                  "now-with-dashes/now-with-dashes", "now.with.dots/simple", "now-with.dashes-and.dots/simple",
                  "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678", "Uppercase_Is_OK_123",
                  "example.com/Uppercase_Is_OK_123", "requests.storage-foo", "a" * 63, "a" * 253 + "/" + "a" * 63]
BAD_QUALIFIED = ["nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash",
                 "Example.com/abc", "example_com/abc", "example.com/", "/simple", "a" * 64, "a" * 254 + "/abc", ""]
GOOD_VALUES = ["simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "", "a" * 63,
               "Uppercase_Is_OK_123", "1.2.3"]
BAD_VALUES = ["nospecialchars%^=@", "Tama-nui-te-rā.is_the_Sun", "\\backslashes", "-starts-with-dash",
              "ends-with-dash-", ".starts.with.dot", "ends.with.dot.", "a" * 64, "has space"]


@pytest.mark.parametrize("value", GOOD_QUALIFIED)
def test_qualified_names_upstream_takes(value: str) -> None:
    assert qualified_name(value) == []


@pytest.mark.parametrize("value", BAD_QUALIFIED)
def test_qualified_names_upstream_refuses(value: str) -> None:
    assert qualified_name(value)


@pytest.mark.parametrize("value", GOOD_VALUES)
def test_label_values_upstream_takes(value: str) -> None:
    assert label_value(value) == []


@pytest.mark.parametrize("value", BAD_VALUES)
def test_label_values_upstream_refuses(value: str) -> None:
    assert label_value(value)


TEXTS = [
    # (name, check, value, upstream's messages)
    ("two slashes", qualified_name, "a/b/c",
     ["a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
      "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
      "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. "
      "'example.com/MyName')"]),
    ("empty prefix and name", qualified_name, "/", ["prefix part must be non-empty", "name part must be non-empty",
     "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
     "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
     "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]),
    ("long name part", qualified_name, "a" * 64, [
        "name part must be no more than 63 bytes"]),
    ("long value", label_value, "a" * 64, ["must be no more than 63 bytes"]),
    ("label with dots", dns1123_label, "a.b", ["must not contain dots"]),
    ("subdomain with capitals", dns1123_subdomain, "Example.com",
     ["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
      "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
      "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
    ("DNS-1035 label starting with a digit", dns1035_label, "1a",
     ["a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
      "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
      "is '[a-z]([-a-z0-9]*[a-z0-9])?')"]),
]


@pytest.mark.parametrize(("name", "check", "value", "messages"), TEXTS, ids=[c[0] for c in TEXTS])
def test_upstream_texts(name: str, check: Callable[[str], list[str]], value: str, messages: list[str]) -> None:
    assert check(value) == messages
