"""Go ``time.ParseDuration`` (kubelet flags such as ``1m30s``), with Go's error texts.

Hand-written: Python has no parser for Go duration strings.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_UNITS = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "μs": Decimal("1e-6"),
          "ms": Decimal("1e-3"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}
_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")


class DurationError(ValueError):
    """Not a Go duration; the message is Go's."""


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_duration(text: str) -> float:
    """Seconds for a Go duration string: ``1m30s`` -> 90.0, ``-5s`` -> -5.0, ``0`` -> 0.0."""
    orig, s = text, text
    sign = 1
    if s[:1] in ("-", "+"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise DurationError(f"time: invalid duration {_quote(orig)}")
    total = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        number, unit = (m.group(1), m.group(2)) if m else ("", "")
        if not number or number == ".":
            raise DurationError(f"time: invalid duration {_quote(orig)}")
        if not unit:
            raise DurationError(f"time: missing unit in duration {_quote(orig)}")
        if unit not in _UNITS:
            raise DurationError(f"time: unknown unit {_quote(unit)} in duration {_quote(orig)}")
        try:
            total += Decimal(number) * _UNITS[unit]
        except InvalidOperation:
            raise DurationError(f"time: invalid duration {_quote(orig)}") from None
        pos = m.end() if m else len(s)
    return float(sign * total)
