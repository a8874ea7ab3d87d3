"""The FastAPI app (/healthz, /readyz, and the OpenAPI schema and page), ``create_server``, which puts the review
dispatcher and its one entry (``ReviewEntry``) in front of it (what ``serve`` runs on the admission port), and
``metrics_app``, what the metrics port serves.

The app has no review route: every review comes in by the one entry (``webhook.server.asgi``), so an app mounted
elsewhere answers none. The OpenAPI schema still describes POST /mutate and /validate, registered in the schema
alone, with the request's schema made from the Structs that decode it."""

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
from webhook.admission.review import AdmissionReview
from webhook.cluster.freshness import STALE
from webhook.cluster.state import ClusterState
from webhook.server.asgi import (
    ASGIApp,
    EdgePolicy,
    Lifecycle,
    Middleware,
    ReviewDispatcher,
    ReviewEntry,
    ReviewGate,
    Scope,
    Send,
)
from webhook.server.service import INTERNAL_ERROR, ReviewService, error_body

JSON = "application/json"
DRAINING = "shutting down: reviews are answered until the drain delay ends (serve --drain-delay)"
log = logging.getLogger("webhook.admission")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(error_body(status, message), status_code=status, media_type=JSON, headers=headers)


# The review's schema, from the Structs that decode it: AdmissionReview and the types it names.
_REVIEW_SCHEMAS = msgspec.json.schema_components([AdmissionReview], ref_template="#/components/schemas/{name}")[1]
_REVIEW_BODY = {"content": {JSON: {"schema": {"$ref": "#/components/schemas/AdmissionReview"}}}, "required": True}
_REVIEW_RESPONSES: dict[str, dict[str, Any]] = {
    "200": {"description": "AdmissionReview with the response", "content": {JSON: {"schema": {}}}},
    "400": {"description": "The body is not a usable AdmissionReview", "content": {JSON: {}}},
    "413": {"description": "The body is larger than 3 MiB", "content": {JSON: {}}},
}
# POST /mutate and /validate as the schema describes them, in the words FastAPI gave the routes they once were
# (summary, operationId): the entry answers them, and no route of the app could.
_REVIEW_OPERATIONS = {
    "/mutate": ("Mutate", "Mutating admission: colocation profiles, priority resolution, batch resources."),
    "/validate": ("Validate", "Validating admission: batch resource rules, Koordinator rules, PriorityClass quota "
                              "presence."),
}


def _review_paths() -> dict[str, Any]:
    return {path: {"post": {"summary": summary, "description": description,
                            "operationId": f"{path[1:]}_{path[1:]}_post", "requestBody": _REVIEW_BODY,
                            "responses": _REVIEW_RESPONSES}}
            for path, (summary, description) in _REVIEW_OPERATIONS.items()}


def create_app(state: ClusterState, openapi: bool = False, lifecycle: Lifecycle | None = None) -> FastAPI:
    """``openapi``: serve /openapi.json and /docs (``serve --openapi``); off by default, they tell a caller
    everything about the server and nothing the apiserver needs. ``lifecycle``: /readyz is 503 while it drains."""
    life = lifecycle or Lifecycle()
    app = FastAPI(title="colocation-webhook", version=__version__, redoc_url=None,
                  openapi_url="/openapi.json" if openapi else None, docs_url="/docs" if openapi else None)

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
        # The reviews are the entry's, not routes of this app: their paths are registered in the schema by hand.
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schema["paths"] = {**_review_paths(), **schema.get("paths", {})}
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
    """The review service, the one entry to it, the FastAPI app, and the dispatcher in front; ``middleware`` wraps
    the dispatcher (the first listed outermost), so it sees review requests too."""
    gate = ReviewGate(ReviewService(state, settings), policy)
    lifecycle = Lifecycle()
    app = create_app(state, openapi=openapi, lifecycle=lifecycle)
    asgi: ASGIApp = ReviewDispatcher(ReviewEntry(gate), app)
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
