"""Large reviews answered in a child process, forked when a burst of them begins and gone when it ends.

A 3 MiB review is a few hundred thousand Python objects. Answered in this process, even in a thread, it costs
the event loop twice over: ``orjson`` builds them holding the GIL (30-100 ms a review, longer than /healthz may
wait), and the small-object allocator keeps the arenas they filled wherever one long-lived object landed among
them, so the process stays 10-25 % above its idle size after every burst (measured; glibc's ``malloc_trim``
cannot reach them). A child process has neither problem: it has its own GIL, and what it allocated goes back to
the system, all of it, when it exits.

``os.fork`` gives the child this process's cluster state, settings and rules as they are at that moment, with
nothing to copy or keep in sync; a burst lasts a second or two. The child closes every file it inherited
except its end of the pipe and stdio (it must not hold the server's sockets open), restores the default signal
handlers, and answers the reviews it is sent one at a time with ``ReviewService.evaluate``; this process counts
each answer in its metrics (``ReviewService.record``). The rules log in the child as they would here (stderr is
shared). If the child dies, the reviews in flight get a 500 and the next burst forks a new one.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import pickle
import signal
from dataclasses import replace
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from webhook.admission.review import Endpoint
from webhook.admission.service import INTERNAL_ERROR, Answer, Evaluation, ReviewService, error_body

log = logging.getLogger("webhook.admission.offload")
CHILD_NICENESS = 10
CHILD_TIMEOUT_SECONDS = 30.0  # ten times the apiserver's timeout: a child this late is stuck, and is killed


class ForkedWorker:
    """One child process answering large reviews for ``service``. ``evaluate`` blocks (call it from a thread),
    one caller at a time; ``close`` ends the child. ``alive`` turns False when the child failed: the caller then
    closes this one and forks another."""

    def __init__(self, service: ReviewService) -> None:
        self.service = service
        self._conn, child = Pipe(duplex=True)
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            _child_main(child, service)
        child.close()
        self.alive = True

    def evaluate(self, endpoint: Endpoint, body: bytes) -> Evaluation:
        try:
            self._conn.send_bytes(pickle.dumps((endpoint, body), protocol=pickle.HIGHEST_PROTOCOL))
            if not self._conn.poll(CHILD_TIMEOUT_SECONDS):
                raise TimeoutError(f"no answer within {CHILD_TIMEOUT_SECONDS} s")
            evaluation = pickle.loads(self._conn.recv_bytes())
        except (OSError, EOFError) as exc:  # TimeoutError is an OSError
            self.alive = False
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            log.error("the process answering large reviews (pid %d) failed: %s; the review gets a 500",
                      self.pid, exc or type(exc).__name__)
            answer = Answer(500, error_body(500, INTERNAL_ERROR))
            return Evaluation(answer, endpoint, "unknown", "error", 0.0)
        if not isinstance(evaluation, Evaluation):  # from our own child; never expected
            raise TypeError(f"unexpected reply from the review process: {type(evaluation).__name__}")
        return evaluation

    def close(self) -> None:
        """End the child (it exits when its pipe closes) and reap it."""
        self._conn.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _child_main(conn: Connection, service: ReviewService) -> None:
    status = 1
    try:
        keep = {0, 1, 2, conn.fileno()}
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
            fd = int(name)
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        # Below the server in the CPU's queue: /healthz and the small reviews go first when both want the CPU
        # (the pod has one); the large reviews take what is left.
        os.nice(CHILD_NICENESS)
        # Short-lived, and a review makes no reference cycles: the cyclic collector would only trace (and
        # copy, page by page) everything inherited.
        gc.disable()
        while True:
            try:
                endpoint, body = pickle.loads(conn.recv_bytes())
            except EOFError:
                break
            conn.send_bytes(pickle.dumps(_lean(service.evaluate(endpoint, body)), protocol=pickle.HIGHEST_PROTOCOL))
        status = 0
    except BaseException:  # nothing may escape into the parent's event loop, which this copy holds
        log.exception("the process answering large reviews failed")
    finally:
        logging.shutdown()
        os._exit(status)


def _lean(evaluation: Evaluation) -> Evaluation:
    """What the parent needs: the answer's body and what ``record`` counts. The patch is in the body already;
    as Python objects it would only cost the parent time under the GIL to unpickle (up to 1 MiB of ops)."""
    decision = evaluation.answer.decision
    if decision is None or not decision.patch:
        return evaluation
    return replace(evaluation, answer=replace(evaluation.answer, decision=replace(decision, patch=[])))
