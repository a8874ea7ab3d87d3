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

import orjson

from webhook.admission import chain
from webhook.admission.context import Settings
from webhook.admission.metrics import Metrics
from webhook.admission.response import Decision, errored
from webhook.admission.review import (
    AdmissionRequest,
    Endpoint,
    ReviewError,
    decode_review,
    encode_response,
)
from webhook.cluster.state import ClusterState

log = logging.getLogger("webhook.admission")

INTERNAL_ERROR = "internal error; see the webhook's log"  # never a traceback in an answer
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


@dataclass(slots=True, frozen=True)
class Evaluation:
    """An answer and what the metrics count of it: ``evaluate`` makes one, ``record`` counts it. Apart, so that
    a review answered in another process (``webhook.admission.offload``) is counted in this one."""

    answer: Answer
    endpoint: Endpoint
    operation: str
    outcome: str      # allowed, patched, denied, bad_request, error
    seconds: float


class ReviewService:
    def __init__(self, state: ClusterState, settings: Settings | None = None, metrics: Metrics | None = None) -> None:
        self.state = state
        self.settings = settings or Settings()
        self.metrics = metrics if metrics is not None else Metrics(state)

    def answer(self, endpoint: Endpoint, body: bytes, explain: list[str] | None = None) -> Answer:
        return self.record(self.evaluate(endpoint, body, explain))

    def record(self, evaluation: Evaluation) -> Answer:
        """Count an evaluation in the metrics; its answer."""
        metrics, decision = self.metrics, evaluation.answer.decision
        metrics.request(evaluation.endpoint, evaluation.operation, evaluation.outcome)
        metrics.observe(evaluation.endpoint, evaluation.seconds)
        if decision is not None:
            if decision.rule_failed:
                metrics.rule_failed(decision.rule)
            elif evaluation.outcome == "denied":
                metrics.denied(decision.rule)
            elif evaluation.outcome == "patched":
                for rule, ops in decision.patch_rules.items():
                    metrics.patched(rule, ops)
        return evaluation.answer

    def evaluate(self, endpoint: Endpoint, body: bytes, explain: list[str] | None = None) -> Evaluation:
        """The answer to one review body, with what the metrics count; never raises."""
        start = time.perf_counter()
        operation = "unknown"

        def done(answer: Answer, outcome: str) -> Evaluation:
            return Evaluation(answer, endpoint, operation, outcome, time.perf_counter() - start)

        try:
            if not self.state.ready:
                # A partial state would answer wrongly (a profiled namespace not listed yet, a class "unknown"):
                # a failed call instead, and the apiserver applies the webhook's failurePolicy.
                reason = self.state.not_ready_reason() or "cluster state not synced yet"
                return done(Answer(503, error_body(503, f"{reason}; this replica answers once every kind is "
                                                        "listed (see /readyz)")), "not_ready")
            try:
                review = decode_review(body)
            except ReviewError as exc:
                return done(Answer(exc.status, error_body(exc.status, exc.message)), "bad_request")
            req = review.request
            operation = req.operation
            if endpoint == "mutate":
                decision = chain.mutate(req, self.state, self.settings, explain)
            else:
                decision = chain.validate(req, self.state, self.settings, explain)
            try:
                patch_json = orjson.dumps(decision.patch) if decision.patch else None
            except TypeError:  # orjson: a patch value nested deeper than 255 levels, or a huge integer
                return done(Answer(400, error_body(400, UNWRITABLE)), "bad_request")
            limit = self.settings.max_patch_bytes
            if patch_json is not None and len(patch_json) > limit:  # the work cap on what the answer carries
                decision = errored(400, f"the patch for this pod would be {len(patch_json)} bytes, more than the "
                                        f"{limit} this webhook sends (its --max-patch-bytes)")
                patch_json = None
            payload = encode_response(review.apiVersion, req.uid, decision, patch_json)
            if decision.rule_failed:
                outcome = "error"
            elif not decision.allowed:
                # A denial without a rule is the chain's own 400: an object that is no object, or too big.
                outcome = "denied" if decision.rule else "bad_request"
                _log_denial(endpoint, req, decision)
            else:
                outcome = "patched" if decision.patch else "allowed"
            return done(Answer(200, payload, decision, review.apiVersion, req.uid), outcome)
        except Exception:  # never a traceback in a response
            log.exception("unexpected error answering %s", endpoint)
            return done(Answer(500, error_body(500, INTERNAL_ERROR)), "error")
