"""events.k8s.io/v1 Events on the replay API server: synthetic routes shaped like the apiserver's answers.

No exchange with the events.k8s.io API was recorded (tests/fixtures/api has the core/v1 create only), so these
routes answer as kube-apiserver does, from its sources: a create is checked as ``ValidateEventCreate`` checks an
events.k8s.io/v1 Event (eventTime required, type Normal/Warning, reportingController a qualified name,
reportingInstance/action/reason required and at most 128 characters, note at most 1 kB, the deprecated core/v1
fields unset, a series with count >= 2 and a lastObservedTime), a MicroTime that does not parse is a 400 like the
JSON decoder's, an existing name is a 409 AlreadyExists, and answers are the stored object with the metadata the
server adds; a strategic-merge patch of ``series`` answers 200 with the merged object, or 404 NotFound once the
Event is gone (its TTL passed: ``expire``).
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

from harness.apiserver import Received, ReplayAPIServer

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
PATH = "/apis/events.k8s.io/v1/namespaces/{ns}/events"


def _status(code: int, reason: str, message: str, name: str = "", causes: list[dict[str, str]] | None = None
            ) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "group": "events.k8s.io", "kind": "events"}
    if causes:
        details = {"name": name, "group": "events.k8s.io", "kind": "Event", "causes": causes}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details, "code": code}


def create_errors(event: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for what ValidateEventCreate refuses in an events.k8s.io/v1 create."""
    errors: list[tuple[str, str]] = []
    if not event.get("eventTime"):
        errors.append(("eventTime", "Required value"))
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(("type", f"Invalid value: \"\": has invalid value: {event.get('type', '')}"))
    for legacy in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount", "deprecatedSource"):
        if event.get(legacy):
            errors.append((legacy, "Invalid value: \"\": needs to be unset"))
    controller = event.get("reportingController") or ""
    if not controller:
        errors.append(("reportingController", "Required value"))
    elif not QUALIFIED_NAME.match(controller) or len(controller.rsplit("/", 1)[-1]) > 63:
        errors.append(("reportingController", f"Invalid value: \"{controller}\": not a qualified name"))
    for field in ("reportingInstance", "action", "reason"):
        value = event.get(field) or ""
        if not value:
            errors.append((field, "Required value"))
        elif len(value) > 128:
            errors.append((field, "Invalid value: \"\": can have at most 128 characters"))
    if len((event.get("note") or "").encode()) > 1024:
        errors.append(("message", "Invalid value: \"\": can have at most 1024 characters"))
    errors += series_errors(event)
    return errors


def series_errors(event: dict[str, Any]) -> list[tuple[str, str]]:
    series = event.get("series")
    if series is None:
        return []
    errors = []
    if (series.get("count") or 0) < 2:
        errors.append(("series.count", "Invalid value: \"\": should be at least 2"))
    if not series.get("lastObservedTime"):
        errors.append(("series.lastObservedTime", "Required value"))
    return errors


def _bad_times(event: dict[str, Any]) -> str | None:
    for value in (event.get("eventTime"), (event.get("series") or {}).get("lastObservedTime")):
        if value is not None and not MICRO_TIME.match(str(value)):
            return (f'parsing time "{value}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse '
                    f'"{str(value)[19:]}" as ".000000"')
    return None


class EventsAPI:
    """Create and patch Events in ``namespaces``; ``stored`` holds them by (namespace, name)."""

    def __init__(self, srv: ReplayAPIServer, namespaces: tuple[str, ...]) -> None:
        self.srv = srv
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 1000
        for ns in namespaces:
            srv.add_handler("POST", PATH.format(ns=ns), self._create)

    def creates(self) -> list[Received]:
        return [r for r in self.srv.received if r.method == "POST" and r.path.startswith("/apis/events.k8s.io/")]

    def patches(self) -> list[Received]:
        return [r for r in self.srv.received if r.method == "PATCH" and r.path.startswith("/apis/events.k8s.io/")]

    def expire(self, namespace: str, name: str) -> None:
        """The apiserver's event TTL (1 h by default) passed: the object is gone."""
        del self.stored[(namespace, name)]

    def _create(self, req: Received) -> tuple[int, Any]:
        event = req.body
        ns = req.path.split("/")[5]
        meta = event.get("metadata") or {}
        name = meta.get("name", "")
        bad = _bad_times(event)
        if bad:
            return 400, _status(400, "BadRequest", f'Event in version "v1" cannot be handled as a Event: {bad}')
        errors = create_errors(event)
        if errors:
            text = ", ".join(f"{f}: {m}" for f, m in errors)
            causes = [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in errors]
            return 422, _status(422, "Invalid", f'Event.events.k8s.io "{name}" is invalid: {text}', name, causes)
        if (ns, name) in self.stored:
            return 409, _status(409, "AlreadyExists", f'events.events.k8s.io "{name}" already exists', name)
        self.version += 1
        stored = copy.deepcopy(event)
        stored["metadata"] = {**meta, "namespace": ns, "uid": str(uuid.uuid4()),
                              "resourceVersion": str(self.version), "creationTimestamp": event["eventTime"][:19] + "Z"}
        self.stored[(ns, name)] = stored
        self.srv.add_handler("PATCH", f"{PATH.format(ns=ns)}/{name}", self._patch)
        return 201, stored

    def _patch(self, req: Received) -> tuple[int, Any]:
        parts = req.path.split("/")
        ns, name = parts[5], parts[7]
        stored = self.stored.get((ns, name))
        if stored is None:
            return 404, _status(404, "NotFound", f'events.events.k8s.io "{name}" not found', name)
        if req.headers.get("Content-Type") != "application/strategic-merge-patch+json":
            return 415, _status(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                "accepted media types include: application/json-patch+json, "
                                "application/merge-patch+json, application/apply-patch+yaml")
        merged = copy.deepcopy(stored)
        for key, value in req.body.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        bad = _bad_times(merged)
        if bad:
            return 400, _status(400, "BadRequest", bad)
        errors = series_errors(merged) if merged.get("series") != stored.get("series") else []
        if errors:
            text = ", ".join(f"{f}: {m}" for f, m in errors)
            return 422, _status(422, "Invalid", f'Event.events.k8s.io "{name}" is invalid: {text}', name)
        self.version += 1
        merged["metadata"]["resourceVersion"] = str(self.version)
        self.stored[(ns, name)] = merged
        return 200, merged
