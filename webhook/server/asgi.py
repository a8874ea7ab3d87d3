"""The HTTP edge of the reviews: the one entry every review comes in by (``ReviewEntry``), the gate behind it that
holds the edge's policy, and the outermost ASGI app (``ReviewDispatcher``) that hands reviews to the entry and
everything else to the FastAPI app.

``ReviewEntry`` is this server's ``ServeHTTP`` (controller-runtime's pkg/webhook/admission/http.go): the one way
in. It tells a review from any other request (POST /mutate or /validate; another method on those paths is a 405),
lets it in through ``ReviewGate`` and answers it. Both ways a review's bytes can come take it and differ only in how
the bytes arrive and leave: the serving protocol's inline path (``webhook.server.serving``: a small review, from the
parser's callbacks) and the dispatcher (a large, chunked or ``Expect: 100-continue`` body, a pipelined request, or
any review under a middleware). The FastAPI app has no review route: an app mounted elsewhere answers no review;
the server is ``AdmissionServer`` over ``create_server``.

``ReviewGate`` holds the edge's policy, the in-flight counts and the metrics of the HTTP edge, and only the entry
calls it. It bounds what reviews may cost the process (``EdgePolicy``): past ``max_in_flight`` reviews at once, or
``max_large_in_flight`` large ones (a body over ``large_body_bytes``), it answers 429 with ``Retry-After``
(Kubernetes' REST client, which the apiserver calls webhooks with, waits and retries on that); a review without the
client certificate ``--client-ca-file`` asks for gets 403, a body over 3 MiB 413. Small reviews are answered in
line, where any hand-off would cost more than the review. Large ones are answered one at a time in one worker
thread (``webhook.server.offload``), so the event loop keeps answering /healthz and the small reviews meanwhile.

FastAPI's request and routing machinery costs about as much per review as all the rules together; the reviews are
the hot path, so they skip it. ``ReviewDispatcher`` is the outermost ASGI app ``serve`` runs: **an ASGI middleware
that must see review requests wraps the dispatcher** (``create_server(..., middleware=[...])``); one added to the
FastAPI app sees every other path only. With a middleware around the dispatcher, the inline path is off and every
review comes through the dispatcher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.admission.review import MAX_BODY_BYTES, REVIEW_PATHS, Endpoint
from webhook.server.memory import MemoryCgroup
from webhook.server.memory_budget import memory_refusal
from webhook.server.offload import LargeReviews
from webhook.server.service import INTERNAL_ERROR, Answer, ReviewService, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Middleware = Callable[[ASGIApp], ASGIApp]

RETRY_AFTER_SECONDS = 1  # the apiserver's webhook timeout is a few seconds: one retry fits
log = logging.getLogger("webhook.admission")


@dataclass(frozen=True, slots=True)
class EdgePolicy:
    """What the review gate lets through. The defaults hold 8 concurrent maximum-size reviews well inside the
    manifests' 256 MiB (docs/benchmarks.md, bench/hostile_load.py)."""

    max_in_flight: int = 32          # reviews being read or answered at once; one more is answered 429
    max_large_in_flight: int = 8     # of them, large ones; each holds its body (up to 3 MiB) while it waits
    large_body_bytes: int = 64 * 1024  # above this a review is answered in the large-review thread
    memory: MemoryCgroup | None = None   # the pod's memory cgroup: a large review that would not fit waits (429)


@dataclass(slots=True)
class Lifecycle:
    """Where the process is in its life, read by /readyz and the connections: ``draining`` from the first
    SIGTERM on (unready, still answering, every answer closing its connection) until the process exits."""

    draining: bool = False


def _too_large(length: int | None) -> Answer:
    size = f"{length} bytes, " if length is not None else ""
    return Answer(413, error_body(413, f"request body is {size}larger than the {MAX_BODY_BYTES} byte limit"))


def content_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:  # a loop, not next() over a generator: half the cost, on every review
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def read_body(receive: Receive) -> bytes | Answer | None:
    """The request body, read from ASGI under the size limit (a Content-Length over it was refused already, by
    ``ReviewGate.admit``); a 413 Answer past it; None when the client went away."""
    chunks, size, more = [], 0, True
    while more and size <= MAX_BODY_BYTES:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        more = message.get("more_body", False)
    if size > MAX_BODY_BYTES:
        return _too_large(None)
    return b"".join(chunks)


def certificate_error(tls: Mapping[Any, Any] | None) -> str | None:
    """Why the connection's client certificate does not do, when the server asks for one (``--client-ca-file``;
    a certificate that does not verify fails the handshake, so what is left is one not given): the ASGI TLS
    extension's ``client_cert_error``, which ``webhook.server.serving`` fills in (None on plain HTTP)."""
    return tls.get("client_cert_error") if tls else None


@dataclass(slots=True)
class Ticket:
    """A review the gate let in, from its headers until it leaves (``ReviewGate.leave``)."""

    path: str
    endpoint: Endpoint
    start: float     # perf_counter when it was let in: its latency runs from here
    large: bool      # its body is over large_body_bytes: answered through the offload
    size: int        # a large one's body size, held against the memory budget; 0 for a small one


class ReviewGate:
    """What lets a review in and counts it, behind the one entry (``ReviewEntry``, its only caller). The edge's
    policy (``EdgePolicy``), the in-flight counts and controller-runtime's metrics (in flight, answered by code,
    latency) live here and only here.

    ``admit`` once the headers are read: a ``Ticket`` (counted in flight) or the refusal to send (counted as
    answered). ``answer`` (in line, a small review) or ``answer_received`` (from a coroutine: any review, a large
    one through the offload) once the body is there: the answer, counted. ``leave`` when the ticket's review is
    over, answered or not (its client went away)."""

    def __init__(self, service: ReviewService, policy: EdgePolicy | None = None) -> None:
        self.service = service
        self.policy = policy or EdgePolicy()
        self.in_flight = 0
        self.large_in_flight = 0
        self._large_sizes: list[int] = []   # the body sizes of the large reviews in flight, for the memory budget
        self._large = LargeReviews(service)

    def admit(self, path: str, endpoint: Endpoint, certificate_error: str | None,
              length: int | None) -> Ticket | Answer:
        """A review on ``path`` whose headers are read: its ticket, or the answer that refuses it before its body
        is read (a client certificate missing where one is asked for; too many reviews, or large ones, in flight;
        a large one that would not fit in memory; a Content-Length over the body limit). ``length``: its
        Content-Length, when given."""
        metrics = self.service.metrics
        refused = self._refusal(certificate_error, length)
        if refused is not None:
            metrics.http_answered(path, refused.status, 0.0)
            return refused
        self.in_flight += 1
        metrics.entered(path)
        if length is None or length <= self.policy.large_body_bytes:
            return Ticket(path, endpoint, time.perf_counter(), False, 0)
        self.large_in_flight += 1
        self._large_sizes.append(length)
        return Ticket(path, endpoint, time.perf_counter(), True, length)

    def _refusal(self, certificate_error: str | None, length: int | None) -> Answer | None:
        policy = self.policy
        if certificate_error is not None:
            return Answer(403, error_body(403, f"reviews need a client certificate signed by the webhook's "
                                               f"--client-ca-file: {certificate_error}"))
        if self.in_flight >= policy.max_in_flight:
            return _busy(f"{self.in_flight} reviews are in flight, the limit (--max-in-flight)")
        if length is not None and length > policy.large_body_bytes:
            if self.large_in_flight >= policy.max_large_in_flight:
                return self._large_busy()
            if (why := self._short_of_memory(length)) is not None:
                return _busy(why)
        if length is not None and length > MAX_BODY_BYTES:
            return _too_large(length)
        return None

    def inline_size(self, length: int | None) -> bool:
        """Whether a review of this Content-Length may be answered in line (``answer``, no coroutine on the way):
        known, and small (a large one goes through the offload, which only a coroutine awaits)."""
        return length is not None and length <= self.policy.large_body_bytes and length <= MAX_BODY_BYTES

    def answer(self, ticket: Ticket, body: bytes) -> Answer:
        """The answer to a small admitted review whose body has arrived, here and now; counted. Never raises."""
        try:
            answer = self.service.answer(ticket.endpoint, body)
        except Exception:  # the service never raises; should it, a 500, as uvicorn gives for an app that does
            log.exception("answering a review on %s failed", ticket.path)
            answer = Answer(500, error_body(500, INTERNAL_ERROR))
        self.service.metrics.http_answered(ticket.path, answer.status, time.perf_counter() - ticket.start)
        return answer

    async def answer_received(self, ticket: Ticket, receive: Receive) -> Answer | None:
        """An admitted review's body read from ASGI under the size limit, then its answer, counted: a small one
        as ``answer`` does, a large one through the offload. A body over ``large_body_bytes`` that came without
        a Content-Length is let in as large only now (or refused 429). None when the client went away."""
        body = await read_body(receive)
        if body is None:
            return None
        if isinstance(body, Answer):
            return self._counted(ticket, body)
        policy = self.policy
        if not ticket.large and len(body) > policy.large_body_bytes:  # no Content-Length: known only now
            if self.large_in_flight >= policy.max_large_in_flight:
                return self._counted(ticket, self._large_busy())
            if (why := self._short_of_memory(len(body))) is not None:  # held already; its decoding is not
                return self._counted(ticket, _busy(why))
            ticket.large, ticket.size = True, len(body)
            self.large_in_flight += 1
            self._large_sizes.append(ticket.size)
        if not ticket.large:
            return self.answer(ticket, body)
        return self._counted(ticket, await self._large.answer(ticket.endpoint, body))

    def _counted(self, ticket: Ticket, answer: Answer) -> Answer:
        self.service.metrics.http_answered(ticket.path, answer.status, time.perf_counter() - ticket.start)
        return answer

    def leave(self, ticket: Ticket) -> None:
        """An admitted review is over: answered (call it once the answer is written: its buffers are free too),
        or its client went away."""
        self.in_flight -= 1
        self.service.metrics.left(ticket.path)
        if ticket.large:
            self.large_in_flight -= 1
            self._large_sizes.remove(ticket.size)
            if self.large_in_flight == 0:  # the burst is over: give back the memory it took
                self._large.end_burst()

    def _short_of_memory(self, body_bytes: int) -> str | None:
        """Why a large review must wait for memory (the pod's cgroup read now, and the large reviews let in), or
        None."""
        memory = self.policy.memory
        reading = memory.read() if memory is not None else None
        return memory_refusal(*reading, body_bytes, self._large_sizes) if reading is not None else None

    def _large_busy(self) -> Answer:
        return _busy(f"{self.large_in_flight} large reviews are in flight, the limit (--max-large-in-flight)")


NOT_ALLOWED = Answer(405, error_body(405, "Method Not Allowed"))  # in the words Starlette gives a route's 405


class ReviewEntry:
    """The one way into the edge for a review, whichever way its bytes come: this server's ``ServeHTTP``
    (controller-runtime's pkg/webhook/admission/http.go). ``begin`` once a request's headers are read tells a review
    from any other request and lets it in through the gate (or refuses it); then ``answer`` (its body here, in line)
    or ``answer_over_asgi`` (its body received and its answer sent over ASGI); ``leave`` for a review let in whose
    client went away before its body was complete. The callers carry bytes; what to answer is decided here and in
    the gate."""

    __slots__ = ("gate",)

    def __init__(self, gate: ReviewGate) -> None:
        self.gate = gate

    def begin(self, method: str, path: str, tls: Mapping[Any, Any] | None, length: int | None,
              inline: bool = False) -> Ticket | Answer | None:
        """A request whose headers are read: None when it is no review (another path: not the entry's), else the
        review's ticket, or the answer that refuses it before its body is read (another method than POST; what the
        gate refuses). ``tls``: the connection's ASGI TLS extension (None on plain HTTP); ``length``: the
        Content-Length, when given. ``inline``: the caller can only answer in line, so a review that needs a
        coroutine (a body of unknown length, or a large one, for the offload) is None too."""
        endpoint = REVIEW_PATHS.get(path)
        if endpoint is None:
            return None
        if method != "POST":
            return NOT_ALLOWED
        gate = self.gate
        if inline and not gate.inline_size(length):
            return None
        return gate.admit(path, endpoint, certificate_error(tls), length)

    def answer(self, ticket: Ticket, body: bytes) -> Answer:
        """The answer to a small review let in (``begin(..., inline=True)``) whose body has arrived, here and now;
        counted, and the review is over. Never raises."""
        gate = self.gate
        try:
            return gate.answer(ticket, body)
        finally:
            gate.leave(ticket)

    async def answer_over_asgi(self, ticket: Ticket, receive: Receive, send: Send) -> None:
        """A review let in: its body read from ASGI, answered (a large one through the offload) and sent."""
        gate = self.gate
        try:
            answer = await gate.answer_received(ticket, receive)
            if answer is not None:  # None: the client went away
                await _send(send, answer)
        finally:  # after the answer went out: its buffers are free too
            gate.leave(ticket)

    def leave(self, ticket: Ticket) -> None:
        """A review let in whose client went away before its body was complete."""
        self.gate.leave(ticket)


class ReviewDispatcher:
    """The outermost ASGI app: a review through the one entry, straight from ASGI; any other request to ``app``."""

    def __init__(self, entry: ReviewEntry, app: ASGIApp) -> None:
        self.entry = entry
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry = self.entry
        review = (entry.begin(scope["method"], scope["path"], scope.get("extensions", {}).get("tls"),
                              content_length(scope["headers"]))
                  if scope["type"] == "http" else None)
        if review is None:
            await self.app(scope, receive, send)
        elif isinstance(review, Answer):
            await _send(send, review)
        else:
            await entry.answer_over_asgi(review, receive, send)


def answer_headers(answer: Answer) -> list[tuple[bytes, bytes]]:
    """The HTTP headers of an answer, on either path."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer.body)).encode())]
    if answer.status == 429:
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    elif answer.status == 405:
        headers.append((b"allow", b"POST"))
    return headers


async def _send(send: Send, answer: Answer) -> None:
    await send({"type": "http.response.start", "status": answer.status, "headers": answer_headers(answer)})
    await send({"type": "http.response.body", "body": answer.body})


def _busy(why: str) -> Answer:
    return Answer(429, error_body(429, f"too many reviews at once: {why}; retry after {RETRY_AFTER_SECONDS} s"))
