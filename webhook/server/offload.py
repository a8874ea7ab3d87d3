"""Large reviews (a body over the dispatcher's ``large_body_bytes``) answered off the event loop: one at a time, in
one worker thread of this process, with no other process involved.

A 3 MiB review is a few hundred thousand Python objects. Decoded and answered on the event loop, it would stop
/healthz and the small reviews for the whole of it; in a thread, the rules' Python code hands the GIL over whenever
the loop asks, and the loop waits at most one C call that holds it: msgspec decoding the body or the decoded review
freed (docs/benchmarks.md, "Issue 29: the house, side by side with the echo"). One thread, not a pool: the pod has
one CPU, and a second would only hold a second decoded review in memory at the same time. When the last large review
of a burst is answered, the memory it took is handed back (``_give_back``).

This replaced a child process forked from this process for each burst. The process runs threads (the event
loop's, the state's watches, this one), and a child forked from it may inherit a lock another thread held at that
moment, held for good (Python 3.12 warns of it). Measured with bench/hostile_load.py at 10 000 namespaces under
256Mi (docs/benchmarks.md, "Figures behind the code's comments"), the thread peaks lower than the child did (the
child's copied pages counted against the pod too) and keeps a few MiB more after a burst; /healthz and the small
reviews wait longer during one, the GIL being shared, still far inside the probes' and the apiserver's timeouts.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from concurrent.futures import ThreadPoolExecutor

from webhook.admission.review import Endpoint
from webhook.heap import collector_paused, malloc_trim
from webhook.server.service import Answer, Evaluation, ReviewService

SWITCH_SECONDS = 0.0005  # sys.setswitchinterval while a large review is evaluated (the default: 0.005)


class LargeReviews:
    """Answers large reviews for ``service`` in its one worker thread (started with the first one), counted in
    its metrics on the event loop; ``end_burst`` after the last of a burst hands the memory back."""

    def __init__(self, service: ReviewService) -> None:
        self.service = service
        self._worker: ThreadPoolExecutor | None = None
        self._trim = malloc_trim()

    async def answer(self, endpoint: Endpoint, body: bytes) -> Answer:
        """The answer to one large review (``ReviewService.answer``), evaluated in the worker thread."""
        evaluation = await asyncio.get_running_loop().run_in_executor(self._executor(), self._evaluate, endpoint, body)
        return self.service.record(evaluation)  # here: the metrics are updated from the event loop only

    def _evaluate(self, endpoint: Endpoint, body: bytes) -> Evaluation:
        # Meanwhile the cyclic collector is paused: the review's objects hold no cycles and reference counting
        # frees them, but each collection the decoding set off would trace all of them so far, holding the GIL.
        # And the GIL goes to the event loop's thread 0.5 ms after it asks, not 5: /healthz or a small review asks
        # several times (each callback of the connection), and waited that long each time.
        previous = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_SECONDS)
        try:
            with collector_paused():
                return self.service.evaluate(endpoint, body)
        finally:
            sys.setswitchinterval(previous)

    def end_burst(self) -> None:
        """No large review is in flight any more: give the memory the burst took back to the system, in the worker
        thread (behind any review queued there meanwhile)."""
        asyncio.get_running_loop().run_in_executor(self._executor(), self._give_back)

    def _give_back(self) -> None:
        # A full collection empties the interpreter's free lists (dicts, lists, tuples, floats): the last of the
        # review's objects freed wait there, one or two in each 1 MiB arena of the small-object allocator, and keep
        # the arena from going back (bench/hostile_load.py; docs/benchmarks.md, "Figures behind the code's
        # comments"). It traces only what came after start-up (``gc.freeze``), so it stays short.
        gc.collect()
        if self._trim is not None:
            self._trim(0)

    def _executor(self) -> ThreadPoolExecutor:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="large-review")
        return self._worker
