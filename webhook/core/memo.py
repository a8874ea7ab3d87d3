"""The one memo policy of the hot path: a pure function of one text, remembered per text.

Pods repeat a few quantity texts ("500m", "1Gi") across containers and across the pods of a workload, and
parsing one with exact decimals costs more than a rule's own work. So a function of such a text may be wrapped in
``memo``, and nothing else caches computations (``bench/memo.py`` shows what each memo is worth). The policy:

- only an exact ``str`` of at most ``MAX_TEXT`` characters is a key: a huge string in a hostile review never
  sits in memory, and a number never shares a key with its text (``1``, ``1.0`` and ``True`` are equal keys);
- only results are kept, never exceptions (a bad text is refused again, at full price);
- at most ``MAX_ENTRIES`` per function; when full the memo starts over (no per-hit bookkeeping);
- ``clear_all()`` empties every memo, for tests.

Reads and writes are single dict operations, so threads may share a memo.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

A = TypeVar("A")
R = TypeVar("R")
A_contra = TypeVar("A_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)

MAX_TEXT = 64
MAX_ENTRIES = 4096
_ALL: list[Memo[Any, Any]] = []


class Memo(Protocol[A_contra, R_co]):
    """A memoised function: call it like the function; ``entries`` holds what it remembers."""

    __name__: str
    entries: dict[str, Any]

    @property
    def __wrapped__(self) -> Callable[[A_contra], R_co]: ...

    def __call__(self, raw: A_contra, /) -> R_co: ...


def memo(fn: Callable[[A], R]) -> Memo[A, R]:
    """``fn`` with its results remembered per short exact text; any other argument is computed every time."""
    entries: dict[str, Any] = {}

    def remembered(raw: A, /) -> R:
        key: Any = raw
        try:
            # a text hit; an unhashable raw raises TypeError, a number misses. Typed by assignment, not cast():
            # a call of its own on every hit of the hot path (34 a review).
            hit: R = entries[key]
            return hit
        except (KeyError, TypeError):
            pass
        value = fn(raw)
        if type(key) is str and len(key) <= MAX_TEXT:  # exact str only: never a subclass or a number
            if len(entries) >= MAX_ENTRIES:
                entries.clear()
            entries[key] = value
        return value

    functools.update_wrapper(remembered, fn)  # name, docstring and __wrapped__ of the function
    wrapped = cast(Memo[A, R], remembered)
    wrapped.entries = entries
    _ALL.append(wrapped)
    return wrapped


def clear_all() -> None:
    for m in _ALL:
        m.entries.clear()
