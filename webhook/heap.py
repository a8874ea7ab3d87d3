"""The process heap, for the two places that make millions of short-lived objects at once (a cluster-state folder
parsed, ``webhook.cluster.files``; a large review decoded and answered, ``webhook.server.offload``): the cyclic
collector paused meanwhile, and glibc's free pages handed back after.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while files load or a large review is decoded and answered: parsing
    makes millions of containers and no cycles, and each full collection would trace everything parsed so far: the
    load would take several times as long (docs/benchmarks.md, "Figures behind the code's comments"). Counted, so
    pauses in two threads do not turn it back on under each other."""
    global _PAUSES
    with _PAUSE_LOCK:
        if _PAUSES == 0:
            _PAUSED_WAS_ENABLED[0] = gc.isenabled()
            gc.disable()
        _PAUSES += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _PAUSES -= 1
            if _PAUSES == 0 and _PAUSED_WAS_ENABLED[0]:
                gc.enable()


_PAUSE_LOCK = threading.Lock()
_PAUSES = 0
_PAUSED_WAS_ENABLED = [True]


@functools.cache
def malloc_trim() -> Callable[[int], object] | None:
    """glibc's ``malloc_trim(0)``: hand the free heap pages of every arena back to the system. None elsewhere."""
    try:
        trim: Callable[[int], object] = ctypes.CDLL("libc.so.6").malloc_trim
        return trim
    except (OSError, AttributeError):
        return None
