"""The FastAPI app (/healthz, /readyz, and the review routes for OpenAPI and mounted use), ``create_server``, which
puts the review dispatcher in front of it (what ``serve`` runs on the admission port), and ``metrics_app``, what
the metrics port serves. The review routes and the dispatcher share one ``ReviewGate``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CollectorRegistry
from starlette.exceptions import HTTPException as StarletteHTTPException

from webhook import __version__
from webhook.admission.context import Settings
from webhook.admission.review import AdmissionReview, Endpoint
from webhook.cluster.freshness import STALE
from webhook.cluster.state import ClusterState
from webhook.server.asgi import (
    ASGIApp,
    EdgePolicy,
    Lifecycle,
    Middleware,
    Receive,
    ReviewDispatcher,
    ReviewGate,
    Scope,
    Send,
    review_over_asgi,
)
from webhook.server.service import INTERNAL_ERROR, ReviewService, error_body

JSON = "application/json"
DRAINING = "shutting down: reviews are answered until the drain delay ends (serve --drain-delay)"
log = logging.getLogger("webhook.admission")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(error_body(status, message), status_code=status, media_type=JSON, headers=headers)


# The review's schema, from the Structs that decode it: AdmissionReview and the types it names.
_REVIEW_SCHEMAS = msgspec.json.schema_components([AdmissionReview], ref_template="#/components/schemas/{name}")[1]
_REVIEW_BODY = {"required": True, "content": {JSON: {"schema": {"$ref": "#/components/schemas/AdmissionReview"}}}}
_REVIEW_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "AdmissionReview with the response", "content": {JSON: {}}},
    400: {"description": "The body is not a usable AdmissionReview", "content": {JSON: {}}},
    413: {"description": "The body is larger than 3 MiB", "content": {JSON: {}}},
}


class _ReviewResponse(Response):
    """A review route's answer, given as the dispatcher gives it (``review_over_asgi``, through the same gate):
    FastAPI sends a Response a route returns by calling it as an ASGI app, and the route has not read the body."""

    def __init__(self, gate: ReviewGate, path: str, endpoint: Endpoint) -> None:
        super().__init__()
        self.gate, self.path, self.endpoint = gate, path, endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await review_over_asgi(self.gate, self.path, self.endpoint, scope, receive, send)


def create_app(state: ClusterState, settings: Settings | None = None,
               service: ReviewService | None = None, openapi: bool = False,
               lifecycle: Lifecycle | None = None, gate: ReviewGate | None = None) -> FastAPI:
    """``openapi``: serve /openapi.json and /docs (``serve --openapi``); off by default, they tell a caller
    everything about the server and nothing the apiserver needs. ``lifecycle``: /readyz is 503 while it drains.
    ``gate``: the one the dispatcher in front uses (``create_server``); by default one of the app's own."""
    service = gate.service if gate is not None else service or ReviewService(state, settings)
    reviews = gate or ReviewGate(service)
    life = lifecycle or Lifecycle()
    app = FastAPI(title="colocation-webhook", version=__version__, redoc_url=None,
                  openapi_url="/openapi.json" if openapi else None, docs_url="/docs" if openapi else None)
    app.state.service = service

    # Reached when the dispatcher is not in front, e.g. this app mounted under a path prefix: the same gate.
    @app.post("/mutate", openapi_extra={"requestBody": _REVIEW_BODY}, responses=_REVIEW_RESPONSES)
    async def mutate() -> Response:
        """Mutating admission: colocation profiles, priority resolution, batch resources."""
        return _ReviewResponse(reviews, "/mutate", "mutate")

    @app.post("/validate", openapi_extra={"requestBody": _REVIEW_BODY}, responses=_REVIEW_RESPONSES)
    async def validate() -> Response:
        """Validating admission: batch resource rules, Koordinator rules, PriorityClass quota presence."""
        return _ReviewResponse(reviews, "/validate", "validate")

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    stale = False   # whether the last /readyz was unready for a cache older than --max-cache-age

    @app.get("/readyz", response_class=PlainTextResponse,
             responses={503: {"description": "not synced yet, stale (--max-cache-age), or shutting down"}})
    async def readyz() -> Response:
        nonlocal stale
        # Unready first, then stop: the endpoints controller takes this replica out while it still answers.
        reason = DRAINING if life.draining else state.not_ready_reason()
        # The probe asks every few seconds: said once when staleness makes this replica unready, once when not.
        if (now_stale := reason is not None and reason.startswith(STALE)) != stale:
            stale = now_stale
            if stale:
                log.warning("/readyz: unready: %s", reason)
            else:
                log.info("/readyz: the cluster state is current again%s", "" if reason is None else f"; {reason}")
        if reason is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(reason, status_code=503)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return _error(400, f"invalid request: {exc.errors()[:3]}")

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> Response:
        log.error("unexpected error: %s", type(exc).__name__)
        return _error(500, INTERNAL_ERROR)

    def openapi_schema() -> dict[str, Any]:
        # The review routes read the raw body for speed, so their schema is registered by hand.
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(_REVIEW_SCHEMAS)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi_schema  # type: ignore[method-assign]  # FastAPI's documented way; its hints forbid it
    return app


@dataclass(slots=True, frozen=True)
class WebhookServer:
    """What ``serve`` runs: ``asgi`` (the dispatcher, wrapped in any middleware) in front of ``app`` on the
    admission port, and ``metrics`` on the metrics port."""

    asgi: ASGIApp
    app: FastAPI
    service: ReviewService
    metrics: ASGIApp
    lifecycle: Lifecycle


def create_server(state: ClusterState, settings: Settings | None = None, middleware: Sequence[Middleware] = (),
                  policy: EdgePolicy | None = None, openapi: bool = False) -> WebhookServer:
    """The review service, the FastAPI app, and the dispatcher in front; ``middleware`` wraps the dispatcher
    (the first listed outermost), so it sees review requests too."""
    gate = ReviewGate(ReviewService(state, settings), policy)
    lifecycle = Lifecycle()
    app = create_app(state, settings, openapi=openapi, lifecycle=lifecycle, gate=gate)
    asgi: ASGIApp = ReviewDispatcher(gate, app)
    for wrap in reversed(middleware):
        asgi = wrap(asgi)
    return WebhookServer(asgi, app, gate.service, metrics_app(gate.service.metrics.registry), lifecycle)


def metrics_app(registry: CollectorRegistry) -> ASGIApp:
    """GET /metrics: the Prometheus text of ``registry`` (OpenMetrics and gzip when asked for); 404 elsewhere."""
    from prometheus_client import make_asgi_app

    exposition = make_asgi_app(registry)

    async def app(scope: Scope, receive: Any, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/metrics":
            await exposition(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan: nothing to start
            return
        body = error_body(404, f"not found: {scope['path']}; this port serves /metrics")
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return app
