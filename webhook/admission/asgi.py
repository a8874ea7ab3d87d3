"""The HTTP edge of the reviews: an outer ASGI dispatcher that hands POST /mutate and /validate to the review
service and everything else to the FastAPI app.

FastAPI's request and routing machinery costs about as much per review as all the rules together; the reviews are
the hot path, so they skip it. ``ReviewDispatcher`` is the outermost ASGI app ``serve`` runs: **an ASGI middleware
that must see review requests wraps the dispatcher** (``create_server(..., middleware=[...])``); one added to the
FastAPI app sees every other path only. The service never raises, so there is no exception for a handler to
catch on this path. ``serve``'s HTTP protocol answers small reviews without ASGI (``webhook.admission.serving``),
through the dispatcher's ``refusal`` and ``*_inline`` methods: the same policy and metrics, one implementation;
with a middleware around the dispatcher, that path is off and every review comes through ``__call__``.

The dispatcher also bounds what reviews may cost the process (``EdgePolicy``): past ``max_in_flight`` reviews at
once, or ``max_large_in_flight`` large ones (a body over ``large_body_bytes``), it answers 429 with
``Retry-After`` (Kubernetes' REST client, which the apiserver calls webhooks with, waits and retries on that).
Large reviews are answered one at a time in one worker thread (``webhook.admission.offload``), so the event loop
keeps answering /healthz and the small reviews meanwhile; small ones stay inline, where any hand-off would cost
more than the review.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.admission.domain.memory_budget import memory_refusal
from webhook.admission.memory import MemoryCgroup
from webhook.admission.offload import LargeReviews
from webhook.admission.review import MAX_BODY_BYTES, REVIEW_PATHS, Endpoint
from webhook.admission.service import Answer, ReviewService, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Middleware = Callable[[ASGIApp], ASGIApp]

RETRY_AFTER_SECONDS = 1  # the apiserver's webhook timeout is a few seconds: one retry fits


@dataclass(frozen=True, slots=True)
class EdgePolicy:
    """What the dispatcher lets through. The defaults hold 8 concurrent maximum-size reviews well inside the
    manifests' 256 MiB (docs/benchmarks.md, bench/hostile_load.py)."""

    max_in_flight: int = 32          # reviews being read or answered at once; one more is answered 429
    max_large_in_flight: int = 8     # of them, large ones; each holds its body (up to 3 MiB) while it waits
    large_body_bytes: int = 64 * 1024  # above this a review is answered in the worker thread
    memory: MemoryCgroup | None = None   # the pod's memory cgroup: a large review that would not fit waits (429)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The listeners and their read limits (``serve``'s flags; ``webhook.admission.serving`` applies them)."""

    host: str = "0.0.0.0"
    port: int = 8443
    metrics_port: int = 8080               # 0: no metrics listener
    read_header_timeout: float = 5.0       # the TLS handshake, then a request's headers
    read_timeout: float = 10.0             # a whole request, body included, from its first byte
    drain_delay: float = 10.0              # after SIGTERM, reviews are still answered this long (unready)
    graceful_shutdown_seconds: int = 10    # then in-flight reviews get this long


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


async def read_body(headers: Sequence[tuple[bytes, bytes]], receive: Receive) -> bytes | Answer | None:
    """The request body, read under the size limit; a 413 Answer past it; None when the client went away."""
    length = content_length(headers)
    if length is not None and length > MAX_BODY_BYTES:
        return _too_large(length)
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


async def review_answer(service: ReviewService, endpoint: Endpoint, scope: Scope, receive: Receive) -> Answer | None:
    """One review over ASGI: the body, then the service's answer; None when the client went away."""
    body = await read_body(scope["headers"], receive)
    if body is None or isinstance(body, Answer):
        return body
    return service.answer(endpoint, body)


def client_certificate_error(scope: Scope) -> str | None:
    """Why the connection's client certificate does not do, when the server asks for one (``--client-ca-file``;
    a certificate that does not verify fails the handshake, so what is left is one not given): the ASGI TLS
    extension's ``client_cert_error``, which ``webhook.admission.serving`` fills in."""
    return certificate_error(scope.get("extensions", {}).get("tls"))


def certificate_error(tls: Mapping[Any, Any] | None) -> str | None:
    """``client_certificate_error`` of the connection's ASGI TLS extension itself (None on plain HTTP)."""
    return tls.get("client_cert_error") if tls else None


class ReviewDispatcher:
    """POST /mutate and /validate to the review service, straight from ASGI; anything else to ``app``."""

    def __init__(self, service: ReviewService, app: ASGIApp, policy: EdgePolicy | None = None) -> None:
        self.service = service
        self.app = app
        self.policy = policy or EdgePolicy()
        self.in_flight = 0
        self.large_in_flight = 0
        self._large_sizes: list[int] = []   # the body sizes of the large reviews in flight, for the memory budget
        self._large = LargeReviews(service)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = REVIEW_PATHS.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        metrics = self.service.metrics
        start = time.perf_counter()
        metrics.entered(path)
        try:
            status = await self._serve(endpoint, scope, receive, send)
            if status is not None:
                metrics.http_answered(path, status, time.perf_counter() - start)
        finally:
            metrics.left(path)

    async def _serve(self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send) -> int | None:
        """Answer one review within the policy; the status sent, or None when the client went away."""
        length = content_length(scope["headers"])
        refused = self.refusal(client_certificate_error(scope), length)
        if refused is not None:
            return await _send(send, refused)
        policy = self.policy
        large = length is not None and length > policy.large_body_bytes
        self.in_flight += 1
        self.large_in_flight += large
        size = length if large and length is not None else 0
        if large:
            self._large_sizes.append(size)
        try:
            body = await read_body(scope["headers"], receive)
            if body is None:
                return None
            if isinstance(body, Answer):
                return await _send(send, body)
            if not large and len(body) > policy.large_body_bytes:  # no Content-Length: known only now
                if self.large_in_flight >= policy.max_large_in_flight:
                    return await _send(send, self._large_busy())
                if (why := self._short_of_memory(len(body))) is not None:  # held already; its decoding is not
                    return await _send(send, _busy(why))
                large, size = True, len(body)
                self.large_in_flight += 1
                self._large_sizes.append(size)
            if not large:
                return await _send(send, self.service.answer(endpoint, body))
            return await _send(send, await self._large.answer(endpoint, body))
        finally:  # after the answer went out: its buffers are free too
            self.in_flight -= 1
            if large:
                self.large_in_flight -= 1
                self._large_sizes.remove(size)
                if self.large_in_flight == 0:  # the burst is over: give back the memory it took
                    self._large.end_burst()

    def refusal(self, certificate_error: str | None, length: int | None) -> Answer | None:
        """The answer that refuses a review before its body is read (a client certificate missing where one is
        asked for; too many reviews, or large ones, in flight; a large one that would not fit in memory), or
        None: it may come in. ``length``: its Content-Length, when given."""
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
        return None

    # -- the serving edge's path for a small review (webhook.admission.serving): the same policy and metrics as
    # __call__, with no coroutine, task or ASGI message on the way. It enters once the headers are read and is
    # answered once its body has arrived; one that is refused is answered at once, from ``refusal``.
    def inline_size(self, length: int | None) -> bool:
        """Whether a review of this Content-Length may take the inline path: known, and small (a large one goes
        to the worker thread, which only the ASGI path awaits)."""
        return length is not None and length <= self.policy.large_body_bytes and length <= MAX_BODY_BYTES

    def enter_inline(self, path: str) -> float:
        """A small review admitted by ``refusal`` whose body is coming: counted in flight; its start time."""
        self.in_flight += 1
        self.service.metrics.entered(path)
        return time.perf_counter()

    def answer_inline(self, endpoint: Endpoint, path: str, body: bytes, start: float) -> Answer:
        """The answer to a review ``enter_inline`` admitted, whose body has arrived; counted as __call__ does."""
        try:
            answer = self.service.answer(endpoint, body)
        finally:
            self.leave_inline(path)
        self.service.metrics.http_answered(path, answer.status, time.perf_counter() - start)
        return answer

    def leave_inline(self, path: str) -> None:
        """A review ``enter_inline`` admitted is over (answered, or its client went away)."""
        self.in_flight -= 1
        self.service.metrics.left(path)

    def refused_inline(self, path: str, answer: Answer) -> None:
        """Count a review ``refusal`` refused on the inline path (answered at once)."""
        self.service.metrics.http_answered(path, answer.status, 0.0)

    def _short_of_memory(self, body_bytes: int) -> str | None:
        """Why a large review must wait for memory (the pod's cgroup read now, and the large reviews let in), or
        None."""
        memory = self.policy.memory
        reading = memory.read() if memory is not None else None
        return memory_refusal(*reading, body_bytes, self._large_sizes) if reading is not None else None

    def _large_busy(self) -> Answer:
        return _busy(f"{self.large_in_flight} large reviews are in flight, the limit (--max-large-in-flight)")


def answer_headers(answer: Answer) -> list[tuple[bytes, bytes]]:
    """The HTTP headers of an answer, on either path."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer.body)).encode())]
    if answer.status == 429:
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    return headers


async def _send(send: Send, answer: Answer) -> int:
    await send({"type": "http.response.start", "status": answer.status, "headers": answer_headers(answer)})
    await send({"type": "http.response.body", "body": answer.body})
    return answer.status


def _busy(why: str) -> Answer:
    return Answer(429, error_body(429, f"too many reviews at once: {why}; retry after {RETRY_AFTER_SECONDS} s"))
