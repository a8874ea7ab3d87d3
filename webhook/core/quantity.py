"""Kubernetes ``resource.Quantity`` parsing and formatting (apimachinery semantics).

Hand-written on purpose: ``kubernetes.utils.parse_quantity`` accepts things the apiserver refuses
(" 1 ", "1_000", "NaN", "1e3Mi"), so the strict grammar lives here once for both programs.
Values are exact ``Decimal``s rounded up to nano scale, as upstream stores them. Arithmetic on them goes through
``_EXACT`` (``exact_add``, ``milli_value``, ``is_whole_milli``): Python's default context keeps 28 digits and would
round a 30-digit cpu, which then reads as "not whole".
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal

from webhook.core.memo import memo

# Upstream's own error texts (apimachinery pkg/api/resource/quantity.go).
ERR_FORMAT = (
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_LOOSE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
BINARY_SUFFIXES = tuple(_BINARY)
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# Quantize to nano under 80 digits: a longer coefficient (or a huge exponent) raises instead of being built.
_CTX = decimal.Context(prec=80, rounding=decimal.ROUND_CEILING)
# Everything else is exact: additions, products and scalings never reach MAX_PREC, and a rounding would raise
# (Inexact is trapped) rather than change a value silently. Exponents keep the default bounds (Overflow raises).
_EXACT = decimal.Context(prec=decimal.MAX_PREC, traps=[decimal.InvalidOperation, decimal.DivisionByZero,
                                                       decimal.Overflow, decimal.Inexact])
exact_add = _EXACT.add
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity; the message is upstream's."""


def parse_quantity(text: object) -> Decimal:
    """Parse a quantity as the apiserver would (a JSON number is accepted like its JSON text)."""
    if isinstance(text, str):
        return _parse(text)
    if isinstance(text, int) and not isinstance(text, bool):
        return _parse(str(text))
    if isinstance(text, float):
        # Go parses the number's JSON text (`cpu: 0.5` in YAML is 0.5); repr gives the shortest
        # text of the same value. NaN and infinities print as words and fail the grammar.
        return _parse(str(int(text)) if text.is_integer() else repr(text))
    raise QuantityError(ERR_FORMAT)


@memo  # pods repeat a few texts; parsing one exactly costs more than a rule (bench/memo.py)
def _parse(text: str) -> Decimal:
    m = _LOOSE.match(text)
    if m is None:
        raise QuantityError(ERR_FORMAT)
    number, suffix = m.group(1), m.group(2)
    if not _NUMBER.match(number):
        raise QuantityError(ERR_NUMERIC)
    try:
        return _scaled(Decimal(number), suffix)
    except decimal.DecimalException:  # beyond 80 significant digits or a huge exponent
        raise QuantityError(ERR_NUMERIC) from None


def _scaled(value: Decimal, suffix: str) -> Decimal:
    if suffix in _BINARY:
        value = _EXACT.multiply(value, _BINARY[suffix])
    elif suffix in _DECIMAL:
        value = value.scaleb(_DECIMAL[suffix], _EXACT)
    elif _EXPONENT.match(suffix):
        value = value.scaleb(int(suffix[1:]), _EXACT)
    else:
        raise QuantityError(ERR_SUFFIX)
    # Nano precision, rounded away from zero like upstream's inf.Dec rounding.
    value = value.quantize(_NANO, rounding=decimal.ROUND_UP, context=_CTX)
    if value == 0:
        return Decimal(0)
    return value.normalize(_CTX)   # <= 80 digits after the quantize: normalize only strips zeros


def milli_value(q: Decimal) -> int:
    """Whole milli-units, rounded up (upstream ``MilliValue``)."""
    return int(q.scaleb(3, _EXACT).to_integral_value(rounding=decimal.ROUND_CEILING))


def int_value(q: Decimal) -> int:
    """Whole units, rounded up (upstream ``Value``)."""
    return int(q.to_integral_value(rounding=decimal.ROUND_CEILING))


def is_whole(q: Decimal) -> bool:
    return q == q.to_integral_value()


def is_whole_milli(q: Decimal) -> bool:
    """Whether ``milli_value`` is exact (no rounding up), at any size."""
    return is_whole(q.scaleb(3, _EXACT))


def format_binary_si(value: int) -> str:
    """Canonical BinarySI form for whole values: ``1536Mi``, ``58472Ki``; < 1024 prints plain."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    v = abs(value)
    if v < 1024:
        return f"{sign}{v}"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if v % unit == 0:
            return f"{sign}{v // unit}{suffix}"
    return f"{sign}{v}"


def format_decimal_si(q: Decimal) -> str:
    """Canonical DecimalSI form: the largest suffix with no fractional digits (``1500m``, ``1k``)."""
    if q == 0:
        return "0"
    sign = "-" if q < 0 else ""
    v = q.copy_abs()   # exact: abs() rounds to the default 28 digits
    for exp, suffix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""),
                        (-3, "m"), (-6, "u"), (-9, "n")):
        scaled = v.scaleb(-exp, _EXACT)
        if is_whole(scaled):
            return f"{sign}{int(scaled)}{suffix}"
    return f"{sign}{int(v.scaleb(9, _EXACT))}n"


@memo
def canonical(raw: object) -> str:
    """A quantity as Go prints it after parsing: "1000" -> "1k", "1024Mi" -> "1Gi" (a binary suffix keeps the
    binary form, whole values only, which is all Kubernetes stores); QuantityError."""
    q = parse_quantity(raw)
    if isinstance(raw, str) and raw[-2:] in BINARY_SUFFIXES and q == q.to_integral_value():
        return format_binary_si(int(q))
    return format_decimal_si(q)
