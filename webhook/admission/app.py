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
UNWRITABLE = ("request.object cannot be written back in a patch: it nests deeper than 255 levels "
              "or holds an integer beyond 64 bits")


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
        # The labelled children, kept per label values: ``labels()`` validates and locks on every call,
        # about as costly as a rule, and the label values repeat (a handful of each).
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:  # created on first use, as labels() does: a series shows once it happened
            child = self._children[key] = metric.labels(*values)
        return child

    def request(self, endpoint: str, operation: str, outcome: str) -> None:
        self._child(self.requests, endpoint, operation, outcome).inc()

    def observe(self, endpoint: str, seconds: float) -> None:
        self._child(self.latency, endpoint).observe(seconds)

    def patched(self, endpoint: str, ops: int) -> None:
        self._child(self.patches, endpoint).inc(ops)

    def denied(self, rule: str) -> None:
        self._child(self.denials, rule).inc()


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


def _error_body(status: int, message: str) -> bytes:
    return orjson.dumps({"error": message, "code": status})


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(_error_body(status, message), status_code=status, media_type=JSON, headers=headers)


def _too_large(length: int | None) -> str:
    size = f"{length} bytes, " if length is not None else ""
    return f"request body is {size}larger than the {MAX_BODY_BYTES} byte limit"


class _WebhookApp(FastAPI):
    """FastAPI with POST /mutate and /validate answered straight from ASGI, ahead of all of FastAPI.

    FastAPI's Request/route machinery costs about as much per request as all the rules together, and
    its outer layers (the OpenTelemetry check, Starlette's error middleware) a few µs more; the reviews
    are the hot path, so they skip it all. ``answer`` never raises, so the error middleware has nothing
    to catch there. Everything else, and the OpenAPI description of these two routes (which answer the
    same through ``answer``), goes through FastAPI.
    """

    review_fast_path: _ReviewFastPath | None = None

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        fast = self.review_fast_path
        if fast is not None and scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in fast.reviews:
            await fast(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


class _ReviewFastPath:
    """One review over raw ASGI: the body read with the size limit, ``answer``, the JSON reply."""

    def __init__(self, answer, reviews) -> None:  # type: ignore[no-untyped-def]
        self.answer = answer
        self.reviews = reviews

    async def reply(self, endpoint: str, run, headers, receive) -> tuple[int, bytes] | None:  # type: ignore[no-untyped-def]
        """Read the body under the size limit and answer it; None when the client went away."""
        length = next((v for k, v in headers if k == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return 413, _error_body(413, _too_large(int(length)))
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
            return 413, _error_body(413, _too_large(None))
        return self.answer(endpoint, run, b"".join(chunks))

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        endpoint, run = self.reviews[scope["path"]]
        result = await self.reply(endpoint, run, scope["headers"], receive)
        if result is None:
            return
        status, payload = result
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


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
    app = _WebhookApp(title="colocation-webhook", version="0.1.0", docs_url=None, redoc_url=None)
    metrics = Metrics(state)
    app.state.metrics = metrics
    app.state.cluster = state

    def answer(endpoint: str, run, body: bytes) -> tuple[int, bytes]:  # type: ignore[no-untyped-def]
        """(HTTP status, JSON body) for one review: the single implementation behind both paths."""
        start = time.perf_counter()
        operation = "unknown"
        try:
            try:
                review = decode_review(body)
            except ReviewError as exc:
                metrics.request(endpoint, operation, "bad_request")
                return exc.status, _error_body(exc.status, exc.message)
            req = review.request
            operation = req.operation
            decision: Decision = run(req, state, settings)
            if not decision.allowed:
                outcome = "denied"
                metrics.denied(decision.rule or "unknown")
            elif decision.patch:
                outcome = "patched"
                metrics.patched(endpoint, len(decision.patch))
            else:
                outcome = "allowed"
            try:
                payload = encode_response(review.apiVersion, req.uid, decision)
            except TypeError:  # orjson: a patch value nested deeper than 255 levels, or a huge integer
                metrics.request(endpoint, operation, "bad_request")
                return 400, _error_body(400, UNWRITABLE)
            metrics.request(endpoint, operation, outcome)
            return 200, payload
        except Exception:  # never a traceback in a response
            log.exception("unexpected error answering %s", endpoint)
            metrics.request(endpoint, operation, "error")
            return 500, _error_body(500, "internal error; see the webhook's log")
        finally:
            metrics.observe(endpoint, time.perf_counter() - start)

    reviews = {"/mutate": ("mutate", chain.mutate), "/validate": ("validate", chain.validate)}

    async def via_fastapi(request: Request, endpoint: str) -> Response:
        # Reached when the fast path did not match, e.g. the app mounted under a path prefix.
        fast = app.review_fast_path
        assert fast is not None
        result = await fast.reply(endpoint, reviews["/" + endpoint][1], request.scope["headers"], request.receive)
        status, payload = result or (400, _error_body(400, "the client closed the connection"))
        return Response(payload, status_code=status, media_type=JSON)

    @app.post("/mutate", openapi_extra={"requestBody": _REVIEW_BODY}, responses=_REVIEW_RESPONSES)
    async def mutate(request: Request) -> Response:
        """Mutating admission: colocation profiles, priority resolution, batch resources."""
        return await via_fastapi(request, "mutate")

    @app.post("/validate", openapi_extra={"requestBody": _REVIEW_BODY}, responses=_REVIEW_RESPONSES)
    async def validate(request: Request) -> Response:
        """Validating admission: batch resource rules, Koordinator rules, PriorityClass quota presence."""
        return await via_fastapi(request, "validate")

    app.review_fast_path = _ReviewFastPath(answer, reviews)

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

