"""The review service: an AdmissionReview body in, the answer out, with no transport in sight.

The one implementation behind every way a review arrives: the ASGI dispatcher, the FastAPI routes, the
``review`` command and the benchmarks. It decodes the envelope, runs the endpoint's chain, encodes the answer in
the request's version and counts the outcome. It never raises: every failure is an answer (400/413 for an
unusable body, 500 for a bug, logged with the review's uid).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal

import orjson

from webhook.admission import chain
from webhook.admission.context import Settings
from webhook.admission.metrics import Metrics
from webhook.admission.response import Decision, errored
from webhook.admission.review import AdmissionRequest, ReviewError, decode_review, encode_response
from webhook.cluster.state import ClusterState

log = logging.getLogger("webhook.admission")

Endpoint = Literal["mutate", "validate"]
ENDPOINTS: tuple[Endpoint, ...] = ("mutate", "validate")
UNWRITABLE = ("request.object cannot be written back in a patch: it nests deeper than 255 levels "
              "or holds an integer beyond 64 bits")


def error_body(status: int, message: str) -> bytes:
    """The JSON body of an HTTP error: what is wrong, and the status again."""
    return orjson.dumps({"error": message, "code": status})


@dataclass(slots=True, frozen=True)
class Answer:
    """An HTTP status and JSON body; ``decision`` is the chain's answer when the body was a usable review."""

    status: int
    body: bytes
    decision: Decision | None = None
    api_version: str = ""
    uid: str = ""


def _log_denial(endpoint: Endpoint, req: AdmissionRequest, decision: Decision) -> None:
    """One info line per denial, with the fields a log pipeline keys on (also as JSON fields)."""
    obj = req.object if isinstance(req.object, dict) else {}
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace = req.namespace or meta.get("namespace") or ""
    name = req.name or meta.get("name") or meta.get("generateName") or ""
    log.info("denied %s/%s (review %s, %s) by rule %s: %s", namespace, name, req.uid, endpoint,
             decision.rule or "-", decision.message,
             extra={"uid": req.uid, "namespace": namespace, "pod": name, "rule": decision.rule, "endpoint": endpoint,
                    "code": decision.code})


class ReviewService:
    def __init__(self, state: ClusterState, settings: Settings | None = None, metrics: Metrics | None = None) -> None:
        self.state = state
        self.settings = settings or Settings()
        self.metrics = metrics if metrics is not None else Metrics(state)

    def answer(self, endpoint: Endpoint, body: bytes, explain: list[str] | None = None) -> Answer:
        start = time.perf_counter()
        metrics = self.metrics
        operation = "unknown"
        try:
            try:
                review = decode_review(body)
            except ReviewError as exc:
                metrics.request(endpoint, operation, "bad_request")
                return Answer(exc.status, error_body(exc.status, exc.message))
            req = review.request
            operation = req.operation
            if endpoint == "mutate":
                decision = chain.mutate(req, self.state, self.settings, explain)
            else:
                decision = chain.validate(req, self.state, self.settings, explain)
            try:
                patch_json = orjson.dumps(decision.patch) if decision.patch else None
            except TypeError:  # orjson: a patch value nested deeper than 255 levels, or a huge integer
                metrics.request(endpoint, operation, "bad_request")
                return Answer(400, error_body(400, UNWRITABLE))
            limit = self.settings.max_patch_bytes
            if patch_json is not None and len(patch_json) > limit:  # the work cap on what the answer carries
                decision = errored(400, f"the patch for this pod would be {len(patch_json)} bytes, more than the "
                                        f"{limit} this webhook sends (its --max-patch-bytes)")
                patch_json = None
            payload = encode_response(review.apiVersion, req.uid, decision, patch_json)
            if decision.rule_failed:
                outcome = "error"
                metrics.rule_failed(decision.rule)
            elif not decision.allowed:
                # A denial without a rule is the chain's own 400: an object that is no object.
                outcome = "denied" if decision.rule else "bad_request"
                if decision.rule:
                    metrics.denied(decision.rule)
                _log_denial(endpoint, req, decision)
            elif decision.patch:
                outcome = "patched"
                for rule, ops in decision.patch_rules.items():
                    metrics.patched(rule, ops)
            else:
                outcome = "allowed"
            metrics.request(endpoint, operation, outcome)
            return Answer(200, payload, decision, review.apiVersion, req.uid)
        except Exception:  # never a traceback in a response
            log.exception("unexpected error answering %s", endpoint)
            metrics.request(endpoint, operation, "error")
            return Answer(500, error_body(500, "internal error; see the webhook's log"))
        finally:
            metrics.observe(endpoint, time.perf_counter() - start)
