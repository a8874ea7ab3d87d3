"""AdmissionReview decoding (admission.k8s.io v1 and v1beta1) and response encoding.

The envelope is validated with pydantic (clear, field-named errors); the object itself stays a raw
dict for speed. Encoding is done with orjson.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webhook.admission.response import Decision

Endpoint = Literal["mutate", "validate"]
REVIEW_PATHS: dict[str, Endpoint] = {"/mutate": "mutate", "/validate": "validate"}  # path -> endpoint

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_BODY_BYTES = 3 * 1024 * 1024


class ReviewError(Exception):
    """A body that is not a usable AdmissionReview: HTTP ``status`` with a message naming the fault."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class GroupVersionKind(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    group: str = ""
    version: str = ""
    resource: str = ""


class AdmissionRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    uid: str = Field(min_length=1)
    kind: GroupVersionKind = GroupVersionKind()
    resource: GroupVersionResource = GroupVersionResource()
    subResource: str = ""
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: dict[str, Any] = {}
    object: dict[str, Any] | None = None
    oldObject: dict[str, Any] | None = None
    dryRun: bool = False
    options: dict[str, Any] | None = None

    @property
    def is_pod(self) -> bool:
        return self.resource.resource == "pods" and self.resource.group == "" and not self.subResource


class AdmissionReview(BaseModel):
    """The request envelope the apiserver POSTs."""

    model_config = ConfigDict(extra="allow", strict=True)
    apiVersion: Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where} is missing" if err["type"] == "missing" else f"{where}: {err['msg']}")
    return "invalid AdmissionReview: " + "; ".join(parts)


def decode_review(body: bytes) -> AdmissionReview:
    """Decode a request body; raises ReviewError(400/413) that names what is wrong."""
    if len(body) > MAX_BODY_BYTES:
        raise ReviewError(413, f"request body is {len(body)} bytes, larger than the {MAX_BODY_BYTES} byte limit")
    if not body:
        raise ReviewError(400, "request body is empty; expected an AdmissionReview JSON object")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(400, f"request body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return review_from_dict(data)


def review_from_dict(data: Any) -> AdmissionReview:
    if not isinstance(data, dict):
        raise ReviewError(400, f"request body must be a JSON object (AdmissionReview), got {type(data).__name__}")
    # A null counts as absent, as in the apiserver's decoding.
    missing = [f for f in ("apiVersion", "kind", "request") if data.get(f) is None]
    if missing:
        raise ReviewError(400, f"invalid AdmissionReview: {', '.join(missing)} "
                               f"{'is' if len(missing) == 1 else 'are'} missing")
    if data["kind"] != "AdmissionReview":
        raise ReviewError(400, f"kind must be AdmissionReview, got {data['kind']!r}")
    if data["apiVersion"] not in API_VERSIONS:
        raise ReviewError(400, f"apiVersion must be one of {', '.join(API_VERSIONS)}, got {data['apiVersion']!r}")
    if not isinstance(data["request"], dict):
        raise ReviewError(400, f"request must be an object, got {type(data['request']).__name__}")
    if data["request"].get("uid") is None:
        raise ReviewError(400, "invalid AdmissionReview: request.uid is missing")
    if data["request"]["uid"] == "":
        raise ReviewError(400, "invalid AdmissionReview: request.uid is empty")
    try:
        return AdmissionReview.model_validate(data)
    except ValidationError as exc:
        raise ReviewError(400, _describe(exc)) from None
    except RecursionError:
        raise ReviewError(400, "invalid AdmissionReview: object is nested too deeply") from None


def encode_response(api_version: str, uid: str, decision: Decision, patch_json: bytes | None = None) -> bytes:
    """The AdmissionReview answer in the request's version, always echoing ``uid``; ``patch_json``: the
    decision's patch already as JSON (the service measures it first)."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    elif decision.patch:
        response["patch"] = base64.b64encode(patch_json or orjson.dumps(decision.patch)).decode()
        response["patchType"] = "JSONPatch"
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.audit_annotations:
        response["auditAnnotations"] = dict(decision.audit_annotations)
    return orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})


def pod_review(pod: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
               username: str = "colocation-webhook-review", uid: str | None = None) -> dict[str, Any]:
    """The dry-run v1 AdmissionReview the apiserver would send for ``pod`` (the offline commands' input); a new
    uid unless one is given."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    pods = {"group": "", "version": "v1", "resource": "pods"}
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    request = {
        "uid": uid or str(uuid.uuid4()), "kind": kind, "resource": pods, "requestKind": kind, "requestResource": pods,
        "name": meta.get("name") or "", "namespace": meta.get("namespace") or "default", "operation": operation,
        "userInfo": {"username": username}, "object": pod, "oldObject": old, "dryRun": True,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
