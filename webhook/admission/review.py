"""AdmissionReview decoding (admission.k8s.io v1 and v1beta1) and response encoding.

One schema: the msgspec Structs below. msgspec decodes a body straight into them and holds each field to its
exact JSON type as it goes (a number is no string, a null only where the type has one, the uid not empty, the
operation one of four); the object itself stays a raw dict, of which it leaves out what no rule reads: the
``managedFields``, a third of a pod as the apiserver sends it. A body it refuses gets a 400 that names the field
and its value. The OpenAPI page's schema is made from the same Structs (app.py). Encoding is done with orjson.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable
from functools import cached_property
from types import UnionType
from typing import Annotated, Any, Literal, TypedDict, Union, get_args, get_origin, get_type_hints

import msgspec
import orjson

from webhook.admission.response import Decision

Endpoint = Literal["mutate", "validate"]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
REVIEW_PATHS: dict[str, Endpoint] = {"/mutate": "mutate", "/validate": "validate"}  # path -> endpoint

ApiVersion = Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
API_VERSIONS: tuple[ApiVersion, ...] = get_args(ApiVersion)
MAX_BODY_BYTES = 3 * 1024 * 1024


class ReviewError(Exception):
    """A body that is not a usable AdmissionReview: HTTP ``status`` with a message naming the fault."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ObjectMeta(TypedDict, total=False):
    """An object's metadata: every field of the API's ObjectMeta but ``managedFields``, which the apiserver fills
    in before admission and no rule reads; msgspec skips it without building it."""

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
    """``request.object`` as the rules read it: a pod's top-level fields (the only kind any rule handles; of
    another kind's object nothing is read), its metadata without ``managedFields``."""

    apiVersion: Any
    kind: Any
    metadata: ObjectMeta
    spec: Any
    status: Any


# Required: what the API's AdmissionRequest always carries (its fields without omitempty), so a review that
# lacks one is refused by name rather than skipped by every rule (no resource: not a pod). Fields, names and
# order as in k8s.io/api admission/v1; any other field (requestKind, requestResource...) is accepted and left out.
class GroupVersionKind(msgspec.Struct):
    group: str
    version: str
    kind: str


class GroupVersionResource(msgspec.Struct):
    group: str
    version: str
    resource: str


# Of a pod's subresources, those whose object the rules judge: "" (the pod itself) and "resize", which changes the
# containers' (and the pod's) cpu and memory (pkg/registry/core/pod/storage/storage.go ResizeREST). Status, binding,
# eviction, ephemeralcontainers and the rest change nothing the rules look at.
JUDGED_SUBRESOURCES = ("", "resize")


class AdmissionRequest(msgspec.Struct, kw_only=True, dict=True):  # dict: room for is_pod's cached value
    """The fields of an AdmissionReview's request that the webhook reads or keeps."""

    uid: Annotated[str, msgspec.Meta(min_length=1)]
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str = ""
    name: str = ""
    namespace: str = ""
    operation: Operation
    userInfo: dict[str, Any]
    object: ReviewedObject | None = None
    oldObject: ReviewedObject | None = None
    dryRun: bool = False
    options: dict[str, Any] | None = None

    @cached_property
    def is_pod(self) -> bool:
        """A pod's own object: the pod, or its ``resize`` subresource (in-place resize, GA in 1.35: the one
        subresource that changes what the rules judge, its object the whole Pod, always an UPDATE, so judged as an
        UPDATE is, ratcheting included). What every rule asks first, so worked out once. Not a field: no body can
        set it."""
        return (self.resource.resource == "pods" and self.resource.group == ""
                and self.subResource in JUDGED_SUBRESOURCES)


class AdmissionReview(msgspec.Struct):
    """The request envelope the apiserver POSTs."""

    apiVersion: ApiVersion
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


# Faster than the dataclasses this schema replaced, and managedFields are left out undecoded (docs/benchmarks.md,
# "The last per cent"). It nests as deep as Python's recursion limit
# (1000) lets it; deeper is a 400.
_DECODER = msgspec.json.Decoder(AdmissionReview)


def decode_review(body: bytes, complete: bool = False) -> AdmissionReview:
    """Decode a request body; raises ReviewError(400/413) that names what is wrong. ``complete``: keep every
    field of the object (the offline commands show the object as it would be stored)."""
    if len(body) > MAX_BODY_BYTES:
        raise ReviewError(413, f"request body is {len(body)} bytes, larger than the {MAX_BODY_BYTES} byte limit")
    if not body:
        raise ReviewError(400, "request body is empty; expected an AdmissionReview JSON object")
    try:
        review = _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        raise _refused(exc, lambda: msgspec.json.decode(body)) from None
    except msgspec.DecodeError as exc:
        raise ReviewError(400, f"request body is not JSON: {_lower(str(exc).removeprefix('JSON is malformed: '))}"
                          ) from None
    except RecursionError:
        raise ReviewError(400, "request body nests too deep to decode (about 1000 levels at most)") from None
    if complete:
        # Checked above, the object and oldObject are taken again whole, managedFields and all.
        request = msgspec.json.decode(body)["request"]
        review.request.object, review.request.oldObject = request.get("object"), request.get("oldObject")
    return review


def review_from_dict(data: Any) -> AdmissionReview:
    """An AdmissionReview already parsed (tests, benchmarks), held to the same schema as a body."""
    try:
        return msgspec.convert(data, AdmissionReview)
    except msgspec.ValidationError as exc:
        raise _refused(exc, lambda: data) from None


def request_from_dict(data: Any) -> AdmissionRequest:
    """An AdmissionReview's ``request`` already parsed (tests), held to the same schema."""
    return review_from_dict({"apiVersion": API_VERSIONS[0], "kind": "AdmissionReview", "request": data}).request


# msgspec's errors name the path ("Expected `str`, got `int` - at `$.request.uid`"); the message adds the value,
# found at that path in the body, and says what the schema expects in words. Any other text is passed on as is.
_AT = re.compile(r"(?P<problem>.+?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_FIELDS = re.compile(r"(?:\.\w+)*")  # a path through the schema's fields (no key of a raw object)
_MISSING = re.compile(r"Object missing required field `(?P<field>\w+)`")
_ABSENT = object()


def _refused(exc: msgspec.ValidationError, parsed: Callable[[], Any]) -> ReviewError:
    """The 400 for what the schema refused; ``parsed()`` gives the body as plain data, to show the value."""
    match = _AT.fullmatch(str(exc))
    problem, at = (match["problem"], match["path"] or "") if match else (str(exc), "")
    where = at.removeprefix(".") or "request body"
    if not _FIELDS.fullmatch(at):  # inside a raw object, under a key msgspec does not show ("[...]")
        return ReviewError(400, f"invalid AdmissionReview: {where}: {_lower(problem)}")
    path = at.split(".")[1:]
    try:
        value = _value_at(parsed(), path)
    except (msgspec.DecodeError, RecursionError):  # a number out of range, or nested too deep, elsewhere
        value = _ABSENT
    missing = _MISSING.fullmatch(problem)
    if missing:
        names = _missing(value, path) or [missing["field"]]
        return ReviewError(400, f"invalid AdmissionReview: {', '.join('.'.join([*path, n]) for n in names)} "
                                f"{'is' if len(names) == 1 else 'are'} missing")
    if value is _ABSENT or not problem.startswith(("Expected `", "Invalid enum value")):
        return ReviewError(400, f"invalid AdmissionReview: {where}: {_lower(problem)}")
    if not path:
        return ReviewError(400, f"request body must be a JSON object (an AdmissionReview), got {_shown(value)}")
    return ReviewError(400, f"invalid AdmissionReview: {where} must be {_expected(_annotation_at(path))}, "
                            f"got {_shown(value)}")


def _value_at(data: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return _ABSENT
        data = data[key]
    return data


def _annotation_at(path: list[str]) -> Any:
    """The schema's type of the field at ``path``, a path msgspec named."""
    annotation: Any = AdmissionReview
    for key in path:
        annotation = get_type_hints(_non_null(annotation), include_extras=True)[key]
    return annotation


def _missing(value: Any, path: list[str]) -> list[str]:
    """Every required field absent from the object at ``path``, in the schema's order."""
    struct = _non_null(_annotation_at(path))
    if not isinstance(value, dict) or not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
        return []
    return [f.encode_name for f in msgspec.structs.fields(struct) if f.required and f.encode_name not in value]


def _non_null(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def _expected(annotation: Any) -> str:
    """What a field of the schema must be, in words."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return "a non-empty string" if any(getattr(m, "min_length", None) for m in args[1:]) else _expected(args[0])
    if origin in (Union, UnionType):
        return " or ".join(_expected(a) for a in args)
    if origin is Literal:
        return args[0] if len(args) == 1 else f"one of {', '.join(args)}"
    return {str: "a string", bool: "a boolean", type(None): "null"}.get(annotation, "an object")


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:]


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
