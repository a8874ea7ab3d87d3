"""The HTTP edge of the reviews: an outer ASGI dispatcher that hands POST /mutate and /validate to the review
service and everything else to the FastAPI app.

FastAPI's request and routing machinery costs about as much per review as all the rules together; the reviews are
the hot path, so they skip it. ``ReviewDispatcher`` is the outermost ASGI app ``serve`` runs: **an ASGI middleware
that must see review requests wraps the dispatcher** (``create_server(..., middleware=[...])``); one added to the
FastAPI app sees every other path only. The service never raises, so there is no exception for a handler to
catch on this path.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from webhook.admission.review import MAX_BODY_BYTES
from webhook.admission.service import Answer, Endpoint, ReviewService, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Middleware = Callable[[ASGIApp], ASGIApp]

REVIEW_PATHS: dict[str, Endpoint] = {"/mutate": "mutate", "/validate": "validate"}


def _too_large(length: int | None) -> Answer:
    size = f"{length} bytes, " if length is not None else ""
    return Answer(413, error_body(413, f"request body is {size}larger than the {MAX_BODY_BYTES} byte limit"))


async def read_body(headers: Sequence[tuple[bytes, bytes]], receive: Receive) -> bytes | Answer | None:
    """The request body, read under the size limit; a 413 Answer past it; None when the client went away."""
    length = next((v for k, v in headers if k == b"content-length"), None)
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        return _too_large(int(length))
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


class ReviewDispatcher:
    """POST /mutate and /validate to the review service, straight from ASGI; anything else to ``app``."""

    def __init__(self, service: ReviewService, app: ASGIApp) -> None:
        self.service = service
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = REVIEW_PATHS.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        metrics = self.service.metrics
        start = time.perf_counter()
        in_flight = metrics.in_flight(path)
        in_flight.inc()
        try:
            answer = await review_answer(self.service, endpoint, scope, receive)
            if answer is None:
                return
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(answer.body)).encode())]})
            await send({"type": "http.response.body", "body": answer.body})
            metrics.http_answered(path, answer.status, time.perf_counter() - start)
        finally:
            in_flight.dec()
