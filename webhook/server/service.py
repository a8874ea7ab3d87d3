"""The review service: an AdmissionReview body in, the answer out, with no transport in sight.

The one implementation behind every way a review arrives: the ASGI dispatcher, the FastAPI routes, the
``review`` and ``audit`` commands and the benchmarks. It decodes the envelope, runs the endpoint's chain, encodes
the answer in the request's version and counts the outcome. It never raises: every failure is an answer (400/413
for an unusable body, 500 for a bug, logged with the review's uid).

It is the server's core without the sockets, so it lives in ``webhook/server/``: its answers are HTTP statuses and
JSON bodies, and it counts into the server's Prometheus metrics (``metrics``). The commands that run it offline
get the very bytes the server would send.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from webhook.admission import chain
from webhook.admission.context import Settings
from webhook.admission.domain.patch import apply_ops
from webhook.admission.response import Decision, chain_outcome, errored
from webhook.admission.review import (
    AdmissionRequest,
    AdmissionReview,
    Endpoint,
    ReviewError,
    decode_review,
    encode_response,
)
from webhook.cluster.state import ClusterState
from webhook.server.metrics import Metrics

log = logging.getLogger("webhook.admission")

INTERNAL_ERROR = "internal error; see the webhook's log"  # never a traceback in an answer
UNWRITABLE = ("request.object cannot be written back in a patch: it nests deeper than 255 levels "
              "or holds an integer beyond 64 bits")


def error_body(status: int, message: str) -> bytes:
    """The JSON body of an HTTP error: what is wrong, and the status again."""
    return orjson.dumps({"error": message, "code": status})


# Not frozen: a frozen __init__ costs more, and every review makes one (docs/benchmarks.md, "The review path trimmed").
@dataclass(slots=True)
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


@dataclass(slots=True)  # not frozen, as Answer
class Evaluation:
    """An answer and what the metrics count of it: ``evaluate`` makes one, ``record`` counts it. Apart, so that
    a review answered in the large-review thread (``webhook.server.offload``) is counted on the event loop's."""

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

    def _not_ready(self) -> Answer | None:
        if self.state.ready:
            return None
        # A partial state would answer wrongly (a profiled namespace not listed yet, a class "unknown"):
        # a failed call instead, and the apiserver applies the webhook's failurePolicy.
        reason = self.state.not_ready_reason() or "cluster state not synced yet"
        return Answer(503, error_body(503, f"{reason}; this replica answers once every kind is listed (see /readyz)"))

    def _decide(self, endpoint: Endpoint, review: AdmissionReview, explain: list[str] | None,
                encode: bool = True) -> tuple[Answer, str]:
        """The chain's answer to a decoded review, encoded in its version, and the outcome the metrics count."""
        req = review.request
        if endpoint == "mutate":
            decision = chain.mutate(req, self.state, self.settings, explain, rule_times=self.metrics.rule_times)
        else:
            decision = chain.validate(req, self.state, self.settings, explain, rule_times=self.metrics.rule_times)
        try:
            patch_json = orjson.dumps(decision.patch) if decision.patch else None
        except TypeError:  # orjson: a patch value nested deeper than 255 levels, or a huge integer
            return Answer(400, error_body(400, UNWRITABLE)), "bad_request"
        limit = self.settings.max_patch_bytes
        if patch_json is not None and len(patch_json) > limit:  # the work cap on what the answer carries
            decision = errored(400, f"the patch for this pod would be {len(patch_json)} bytes, more than the "
                                    f"{limit} this webhook sends (its --max-patch-bytes)")
            patch_json = None
        payload = encode_response(review.apiVersion, req.uid, decision, patch_json) if encode else b""
        if decision.rule_failed:
            outcome = "error"
        elif not decision.allowed:
            # A denial without a rule is the chain's own 400: an object that is no object, or too big.
            outcome = "denied" if decision.rule else "bad_request"
            _log_denial(endpoint, req, decision)
        else:
            outcome = "patched" if decision.patch else "allowed"
        return Answer(200, payload, decision, review.apiVersion, req.uid), outcome

    def decided(self, endpoint: Endpoint, review: AdmissionReview, explain: list[str] | None = None) -> Answer:
        """``evaluate`` for a review already decoded (the offline commands), uncounted; never raises. The answer's
        body is left empty: those commands read its decision (and encode the outcome of both chains)."""
        try:
            return self._not_ready() or self._decide(endpoint, review, explain, encode=False)[0]
        except Exception:  # never a traceback in an answer
            log.exception("unexpected error answering %s", endpoint)
            return Answer(500, error_body(500, INTERNAL_ERROR))

    def evaluate(self, endpoint: Endpoint, body: bytes, explain: list[str] | None = None) -> Evaluation:
        """The answer to one review body, with what the metrics count; never raises."""
        start = time.perf_counter()
        operation = "unknown"

        def done(answer: Answer, outcome: str) -> Evaluation:
            return Evaluation(answer, endpoint, operation, outcome, time.perf_counter() - start)

        try:
            if (busy := self._not_ready()) is not None:
                return done(busy, "not_ready")
            try:
                review = decode_review(body)
            except ReviewError as exc:
                return done(Answer(exc.status, error_body(exc.status, exc.message)), "bad_request")
            operation = review.request.operation
            answer, outcome = self._decide(endpoint, review, explain)
            return done(answer, outcome)
        except Exception:  # never a traceback in a response
            log.exception("unexpected error answering %s", endpoint)
            return done(Answer(500, error_body(500, INTERNAL_ERROR)), "error")


@dataclass(slots=True, frozen=True)
class DryRun:
    """A review taken through both chains as the apiserver takes it: the mutating answer, the validating
    decision on the patched object (an empty one when the mutation denied) and the object as it would be stored.
    ``problem`` says why the review could not be answered on its merits (an unusable body); then the rest is
    empty."""

    mutating: Answer
    validation: Decision
    final: Any
    problem: str = ""

    @property
    def mutation(self) -> Decision:
        return self.mutating.decision or Decision()

    @property
    def outcome(self) -> Decision:
        """What the client is told, as one answer (``chain_outcome``)."""
        return chain_outcome(self.mutation, self.validation)


def dry_run(service: ReviewService, review: dict[str, Any], explain: list[str] | None = None) -> DryRun:
    """Mutate, apply the patch, validate: what `review` and `audit` ask, with the server's own answers.

    The review is decoded once, as the server decodes a body; the validating step gets the patched object."""
    def unusable(answer: Answer) -> DryRun:
        message = str(orjson.loads(answer.body).get("error") or "") if answer.body else ""
        return DryRun(answer, Decision(), None, message or f"HTTP {answer.status}")

    try:
        decoded = decode_review(orjson.dumps(review), complete=True)
    except TypeError as exc:  # YAML can hold what JSON cannot: non-text keys, integers beyond 64 bits
        return DryRun(Answer(400, b""), Decision(), None, f"cannot be sent as JSON: {exc}")
    except ReviewError as exc:
        return DryRun(Answer(exc.status, b""), Decision(), None, exc.message)
    first = service.decided("mutate", decoded, explain)
    if first.decision is None:
        return unusable(first)
    final = decoded.request.object
    if not first.decision.allowed or not isinstance(final, dict):
        return DryRun(first, Decision(), final)
    final = apply_ops(final, first.decision.patch)
    patched = msgspec.structs.replace(decoded, request=msgspec.structs.replace(decoded.request, object=final))
    second = service.decided("validate", patched, explain)
    if second.decision is None:
        return unusable(second)
    return DryRun(first, second.decision, final)
