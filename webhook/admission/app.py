"""The HTTP edge: FastAPI routes for /mutate, /validate, /healthz, /readyz and /metrics."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.exceptions import HTTPException as StarletteHTTPException

from webhook.admission import chain
from webhook.admission.response import Decision
from webhook.admission.review import MAX_BODY_BYTES, AdmissionReview, ReviewError, decode_review, encode_response
from webhook.cluster.state import ClusterState

log = logging.getLogger("webhook.admission")

# Buckets below 5 ms: the apiserver's own smallest bucket is 5 ms and we answer well under it.
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
JSON = "application/json"


class Metrics:
    def __init__(self, state: ClusterState) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("colocation_webhook_requests", "Admission requests by endpoint, operation and outcome",
                                ["endpoint", "operation", "outcome"], registry=self.registry)
        self.latency = Histogram("colocation_webhook_request_duration_seconds", "Time to answer one admission review",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.patches = Counter("colocation_webhook_patch_operations", "JSON Patch operations sent",
                               ["rule"], registry=self.registry)
        self.denials = Counter("colocation_webhook_denials", "Denied admission reviews by rule",
                               ["rule"], registry=self.registry)
        self.registry.register(_StateCollector(state))


class _StateCollector:
    """Cache sync state and object counts, read at scrape time."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def collect(self):  # type: ignore[no-untyped-def]
        synced = GaugeMetricFamily("colocation_webhook_cache_synced", "1 when the kind completed its first sync",
                                   labels=["kind"])
        objects = GaugeMetricFamily("colocation_webhook_cache_objects", "Objects held in the cache",
                                    labels=["kind"])
        done = self.state.synced_kinds()
        for kind, n in self.state.counts().items():
            synced.add_metric([kind], 1.0 if kind in done else 0.0)
            objects.add_metric([kind], float(n))
        yield synced
        yield objects


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps({"error": message, "code": status}), status_code=status, media_type=JSON,
                    headers=headers)


_REVIEW_SCHEMA = AdmissionReview.model_json_schema(ref_template="#/components/schemas/{model}")
_REVIEW_DEFS = _REVIEW_SCHEMA.pop("$defs", {})
_REVIEW_BODY = {"required": True, "content": {JSON: {"schema": {"$ref": "#/components/schemas/AdmissionReview"}}}}
_REVIEW_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "AdmissionReview with the response", "content": {JSON: {}}},
    400: {"description": "The body is not a usable AdmissionReview", "content": {JSON: {}}},
    413: {"description": "The body is larger than 3 MiB", "content": {JSON: {}}},
}


def create_app(state: ClusterState, settings: chain.Settings | None = None) -> FastAPI:
    settings = settings or chain.Settings()
    app = FastAPI(title="colocation-webhook", version="0.1.0", docs_url=None, redoc_url=None)
    metrics = Metrics(state)
    app.state.metrics = metrics
    app.state.cluster = state

    async def read_body(request: Request) -> bytes:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise ReviewError(413, f"request body is {length} bytes, larger than the {MAX_BODY_BYTES} byte limit")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ReviewError(413, f"request body is larger than the {MAX_BODY_BYTES} byte limit")
            chunks.append(chunk)
        return b"".join(chunks)

    async def handle(request: Request, endpoint: str, run) -> Response:  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        operation = "unknown"
        try:
            try:
                review = decode_review(await read_body(request))
            except ReviewError as exc:
                metrics.requests.labels(endpoint, operation, "bad_request").inc()
                return _error(exc.status, exc.message)
            req = review.request
            operation = req.operation
            decision: Decision = run(req, state, settings)
            if not decision.allowed:
                outcome = "denied"
                metrics.denials.labels(decision.rule or "unknown").inc()
            elif decision.patch:
                outcome = "patched"
                metrics.patches.labels(endpoint).inc(len(decision.patch))
            else:
                outcome = "allowed"
            metrics.requests.labels(endpoint, operation, outcome).inc()
            return Response(encode_response(review.apiVersion, req.uid, decision), media_type=JSON)
        except Exception:  # never a traceback in a response
            log.exception("unexpected error answering %s", endpoint)
            metrics.requests.labels(endpoint, operation, "error").inc()
            return _error(500, "internal error; see the webhook's log")
        finally:
            metrics.latency.labels(endpoint).observe(time.perf_counter() - start)

    @app.post("/mutate", openapi_extra={"requestBody": _REVIEW_BODY}, responses=_REVIEW_RESPONSES)
    async def mutate(request: Request) -> Response:
        """Mutating admission: colocation profiles, priority resolution, batch resources."""
        return await handle(request, "mutate", chain.mutate)

    @app.post("/validate", openapi_extra={"requestBody": _REVIEW_BODY}, responses=_REVIEW_RESPONSES)
    async def validate(request: Request) -> Response:
        """Validating admission: batch resource rules, Koordinator rules, PriorityClass quota presence."""
        return await handle(request, "validate", chain.validate)

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse, responses={503: {"description": "not synced yet"}})
    async def readyz() -> Response:
        reason = state.not_ready_reason()
        if reason is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(reason, status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse,
             responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}})
    async def metrics_endpoint() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return _error(400, f"invalid request: {exc.errors()[:3]}")

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> Response:
        log.error("unexpected error: %s", type(exc).__name__)
        return _error(500, "internal error; see the webhook's log")

    def openapi() -> dict[str, Any]:
        # The review routes read the raw body for speed, so their schema is registered by hand.
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(_REVIEW_DEFS)
            schemas["AdmissionReview"] = _REVIEW_SCHEMA
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app

