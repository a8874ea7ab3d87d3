"""The apiserver's checks of names, label keys and label values, with apimachinery's texts (pure).

``IsQualifiedName`` (a label key or annotation key), ``IsValidLabelValue``, ``IsDNS1123Label``,
``IsDNS1123Subdomain`` and ``IsDNS1035Label`` from ``k8s.io/apimachinery/pkg/api/validate/content`` (formerly
``util/validation``): each returns the list of upstream's messages, empty when the value is valid. Callers place
them in a ``field.Invalid`` text (``webhook.core.fielderrors.invalid``). Written from upstream's rules and texts; no
Python library reproduces them.
"""

from __future__ import annotations

import re

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                  "alphanumeric character")
_LABEL_VALUE_FMT = f"({_LABEL_KEY_FMT})?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character")
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                      "must start and end with an alphanumeric character")
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                          "'.', and must start and end with an alphanumeric character")
_DNS1035_LABEL_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                      "alphabetic character, and end with an alphanumeric character")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253

_label_key = re.compile(_LABEL_KEY_FMT)
_label_value = re.compile(_LABEL_VALUE_FMT)
_dns1123_label = re.compile(DNS1123_LABEL_FMT)
_dns1123_subdomain = re.compile(DNS1123_SUBDOMAIN_FMT)
_dns1035_label = re.compile(DNS1035_LABEL_FMT)


def max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``RegexError``, built as upstream builds it: ``<msg> (e.g. 'a',  or 'b', regex used for validation is
    '<fmt>')`` (each example is followed by ", " and the next preceded by " or ")."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _too_long(value: str, limit: int) -> bool:
    return len(value.encode()) > limit


def dns1123_label(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX)] if _too_long(value, LABEL_MAX) else []
    if not _dns1123_label.fullmatch(value):
        errs.append("must not contain dots" if _dns1123_subdomain.fullmatch(value)
                    else regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    errs = [max_len_error(SUBDOMAIN_MAX)] if _too_long(value, SUBDOMAIN_MAX) else []
    if not _dns1123_subdomain.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1035_label(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX)] if _too_long(value, LABEL_MAX) else []
    if not _dns1035_label.fullmatch(value):
        errs.append(regex_error(_DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: a label key (annotation keys are checked lower-cased), an optional DNS subdomain
    prefix and ``/`` before a name part."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(prefix)]
    else:
        return ["a valid label key " + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif _too_long(name, LABEL_MAX):
        errs.append("name part " + max_len_error(LABEL_MAX))
    if not _label_key.fullmatch(name):
        errs.append("name part " + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value(value: str) -> list[str]:
    """``IsValidLabelValue``: empty, or at most 63 bytes of alphanumerics, '-', '_' and '.' starting and ending
    with an alphanumeric."""
    errs = [max_len_error(LABEL_MAX)] if _too_long(value, LABEL_MAX) else []
    if not _label_value.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs
