"""AdmissionReview decoding (admission.k8s.io v1 and v1beta1) and response encoding.

The envelope is decoded into plain dataclasses, each field of its exact JSON type; the object itself stays a raw
dict for speed. msgspec decodes a body straight into them and leaves out what no rule reads: the object's
``managedFields`` (a third of a pod as the apiserver sends it). A body it refuses is decoded again with orjson
and checked field by field, which names what is wrong (or, for the few inputs msgspec is stricter about, accepts
it as before). Encoding is done with orjson.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import msgspec
import orjson
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions only before 3.12

from webhook.admission.response import Decision

Endpoint = Literal["mutate", "validate"]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)
REVIEW_PATHS: dict[str, Endpoint] = {"/mutate": "mutate", "/validate": "validate"}  # path -> endpoint

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_BODY_BYTES = 3 * 1024 * 1024


class ReviewError(Exception):
    """A body that is not a usable AdmissionReview: HTTP ``status`` with a message naming the fault."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


if TYPE_CHECKING:
    # To the type checker (and mypyc) the object is the plain dict it is at run time.
    ReviewedObject = dict[str, Any]
else:
    class ObjectMeta(TypedDict, total=False):
        """An object's metadata: every field of the API's ObjectMeta but ``managedFields``, which the apiserver
        fills in before admission and no rule reads; msgspec skips it without building it."""

        name: Any
        generateName: Any
        namespace: Any
        selfLink: Any
        uid: Any
        resourceVersion: Any
        generation: Any
        creationTimestamp: Any
        deletionTimestamp: Any
        deletionGracePeriodSeconds: Any
        labels: Any
        annotations: Any
        ownerReferences: Any
        finalizers: Any
        clusterName: Any  # in ObjectMeta up to Kubernetes 1.24

    class ReviewedObject(TypedDict, total=False):
        """``request.object`` as the rules read it: a pod's top-level fields (the only kind any rule handles;
        of another kind's object nothing is read), its metadata without ``managedFields``."""

        apiVersion: Any
        kind: Any
        metadata: ObjectMeta
        spec: Any
        status: Any


# The schema published for the object: any object or null, as the field-by-field checks accept (what msgspec
# decodes into ``ReviewedObject`` is a choice of what to build, not a constraint on the request).
_ANY_OBJECT_OR_NULL = {"anyOf": [{"type": "object", "additionalProperties": True}, {"type": "null"}]}
OptionalObject = Annotated[ReviewedObject | None, WithJsonSchema(_ANY_OBJECT_OR_NULL)]


@dataclass(slots=True)
class GroupVersionKind:
    group: str = ""
    version: str = ""
    kind: str = ""


@dataclass(slots=True)
class GroupVersionResource:
    group: str = ""
    version: str = ""
    resource: str = ""


@dataclass(slots=True)
class AdmissionRequest:
    """The fields of an AdmissionReview's request that the webhook reads or keeps; any other field
    (``requestKind``, ``requestResource``...) is accepted and left out."""

    # Not empty, for the OpenAPI schema (pydantic) and the decoder (msgspec); the checks below say so by name.
    uid: Annotated[str, Field(min_length=1), msgspec.Meta(min_length=1)]
    operation: Operation
    kind: GroupVersionKind = field(default_factory=GroupVersionKind)
    resource: GroupVersionResource = field(default_factory=GroupVersionResource)
    subResource: str = ""
    name: str = ""
    namespace: str = ""
    userInfo: dict[str, Any] = field(default_factory=dict)
    object: OptionalObject = None
    oldObject: OptionalObject = None
    dryRun: bool = False
    options: dict[str, Any] | None = None
    # A pod itself (not a subresource): what every rule asks first, so worked out once. Always worked out in
    # __post_init__, whatever is passed (an init field with a default only because msgspec requires one).
    is_pod: SkipJsonSchema[bool] = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.is_pod = self.resource.resource == "pods" and self.resource.group == "" and not self.subResource


@dataclass(slots=True)
class AdmissionReview:
    """The request envelope the apiserver POSTs."""

    apiVersion: Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


# Decodes into the dataclasses above, to the same exact types as the checks below (msgspec is strict: no number
# for a string, no null where the type has none). 15 µs against 19 for orjson and the checks on the pretty-printed
# koord-batch review, 11 against 18 on the same review as the apiserver sends it, compact (docs/benchmarks.md).
# It nests as deep as Python's recursion limit (1000) lets it, under orjson's 1024: a body too deep for one is
# too deep for both. It keeps an integer beyond 64 bits exact where orjson reads a float.
_DECODER = msgspec.json.Decoder(AdmissionReview)


def decode_review(body: bytes, complete: bool = False) -> AdmissionReview:
    """Decode a request body; raises ReviewError(400/413) that names what is wrong. ``complete``: keep every
    field of the object (the offline commands show the object as it would be stored)."""
    if len(body) > MAX_BODY_BYTES:
        raise ReviewError(413, f"request body is {len(body)} bytes, larger than the {MAX_BODY_BYTES} byte limit")
    if not body:
        raise ReviewError(400, "request body is empty; expected an AdmissionReview JSON object")
    if not complete:
        try:
            return _DECODER.decode(body)
        except Exception:  # not JSON, a wrong type, too deep: the checks below name it
            pass
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
    return AdmissionReview(data["apiVersion"], "AdmissionReview", request_from_dict(data["request"]))


# The checks that name a fault, for a body msgspec refused (and the offline commands' whole decoding): by hand,
# not by a pydantic model, which took 4.7 µs a review to these 1.9 (docs/benchmarks.md). Types are exact, as the
# apiserver's JSON decoding has them (a number is no string, a string no boolean), and a null only where the
# schema allows one; tests/test_review_decoding.py holds them to what msgspec accepts.
def request_from_dict(request: Any) -> AdmissionRequest:
    """An AdmissionReview's ``request`` as the webhook reads it; ReviewError(400) naming the first bad field."""
    if not isinstance(request, dict):
        raise ReviewError(400, f"request must be an object, got {type(request).__name__}")
    uid = request.get("uid")
    if uid is None or uid == "":
        raise ReviewError(400, f"invalid AdmissionReview: request.uid is {'missing' if uid is None else 'empty'}")
    if type(uid) is not str:
        raise _wrong("request.uid", "a string", uid)
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(400, "invalid AdmissionReview: request.operation is missing" if operation is None else
                          f"invalid AdmissionReview: request.operation must be one of {', '.join(OPERATIONS)}, "
                          f"got {_shown(operation)}")
    kind, resource = _map(request, "kind", "request."), _map(request, "resource", "request.")
    dry_run = request.get("dryRun", False)
    if type(dry_run) is not bool:
        raise _wrong("request.dryRun", "a boolean", dry_run)
    return AdmissionRequest(
        uid, operation,
        GroupVersionKind(_text(kind, "group", "request.kind."), _text(kind, "version", "request.kind."),
                         _text(kind, "kind", "request.kind.")),
        GroupVersionResource(_text(resource, "group", "request.resource."),
                             _text(resource, "version", "request.resource."),
                             _text(resource, "resource", "request.resource.")),
        _text(request, "subResource", "request."), _text(request, "name", "request."),
        _text(request, "namespace", "request."), _map(request, "userInfo", "request."),
        _map(request, "object", "request.", True), _map(request, "oldObject", "request.", True), dry_run,
        _map(request, "options", "request.", True))


def _text(data: dict[str, Any], key: str, where: str) -> str:
    """``data[key]``, a string; "" when absent."""
    value = data.get(key, "")
    if type(value) is str:
        return value
    raise _wrong(where + key, "a string", value)


def _map(data: dict[str, Any], key: str, where: str, nullable: bool = False) -> Any:
    """``data[key]``, an object; {} when absent, or None when absent or null where ``nullable``."""
    value = data.get(key)
    if type(value) is dict or (value is None and nullable):
        return value
    if value is None and key not in data:
        return {}
    raise _wrong(where + key, "an object" + (" or null" if nullable else ""), value)


def _wrong(field_path: str, expected: str, value: Any) -> ReviewError:
    return ReviewError(400, f"invalid AdmissionReview: {field_path} must be {expected}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """A bad value as an error names it: a short text or a number as written, anything else by its JSON type."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return {dict: "an object", list: "an array", bool: "a boolean"}.get(type(value), "null")


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
