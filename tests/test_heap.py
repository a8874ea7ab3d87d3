"""The process heap (webhook/heap.py): the cyclic collector paused while either thread needs it so, and back on
only when the last pause ends; glibc's malloc_trim found and callable."""

from __future__ import annotations

import gc
import threading

from webhook.heap import collector_paused, malloc_trim


def test_the_collector_is_paused_until_the_last_of_two_pauses_ends() -> None:
    assert gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    assert entered.wait(5)
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread's pause still holds"
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_malloc_trim_is_glibcs() -> None:
    trim = malloc_trim()
    assert trim is not None, "glibc's malloc_trim (Debian's libc6)"
    assert trim(0) in (0, 1)   # 1: memory was given back
