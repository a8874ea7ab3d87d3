"""``colocation-webhook certs bootstrap``: the serving Secret and the webhooks' ``caBundle``, from inside the cluster.

The default install runs it once as a Job with the project's own image, the way ingress-nginx's
kube-webhook-certgen does: the Secret is created when it is missing and kept while it is good (it parses,
its key matches, its CA issued it, it names the Service and has more than 30 days left), else replaced;
then every webhook of the named configurations that does not trust the Secret's CA gets it as its
``caBundle``. Running it again changes nothing. The webhook itself only mounts the Secret.

``api_calls`` lists every request this module can make; the Job's RBAC is derived from it (and a test
checks both the manifests and the requests actually sent against it).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography import x509

from webhook.tls.certs import days_error, issue, pair_problem, service_names

log = logging.getLogger("colocation-webhook.certs")

SECRET_TYPE = "kubernetes.io/tls"
DATA_KEYS = ("tls.crt", "tls.key", "ca.crt")
# The Job runs on (re-)apply only, so a pair is replaced well before it expires.
RENEW_BEFORE = dt.timedelta(days=30)
JSON_PATCH = "application/json-patch+json"
ADMISSION_GROUP = "admissionregistration.k8s.io"
CONFIGURATION_KINDS = {"mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
                       "validatingwebhookconfigurations": "ValidatingWebhookConfiguration"}
LABELS = {"app.kubernetes.io/name": "colocation-webhook", "app.kubernetes.io/part-of": "colocation-webhook",
          "app.kubernetes.io/managed-by": "colocation-webhook-certs-bootstrap"}

# (namespace, or "*" for cluster-scoped; apiGroup; resource; verb; resourceNames, empty = any name)
ApiCall = tuple[str, str, str, str, tuple[str, ...]]


class BootstrapInputError(ValueError):
    """Something in the cluster or on the command line that no retry will fix (exit code 2)."""


class BootstrapError(RuntimeError):
    """An API request failed (exit code 1; the Job retries)."""


@dataclass(frozen=True)
class Target:
    namespace: str
    service: str
    secret_name: str
    mutating: str | None = None
    validating: str | None = None
    days: int = 3650

    def configurations(self) -> list[tuple[str, str]]:
        """(resource, name) of each webhook configuration to patch."""
        return [(r, n) for r, n in (("mutatingwebhookconfigurations", self.mutating),
                                    ("validatingwebhookconfigurations", self.validating)) if n]


def api_calls(target: Target) -> set[ApiCall]:
    """Every API request ``bootstrap`` may make for ``target``.

    ``create`` cannot be limited to a name: the apiserver authorizes a create before the object (and its
    name) is read, so RBAC ``resourceNames`` never match it; everything else is limited by name."""
    ns, name = target.namespace, target.secret_name
    calls: set[ApiCall] = {(ns, "", "secrets", "get", (name,)), (ns, "", "secrets", "update", (name,)),
                           (ns, "", "secrets", "create", ())}
    for resource, config in target.configurations():
        calls |= {("*", ADMISSION_GROUP, resource, verb, (config,)) for verb in ("get", "patch")}
    return calls


# -- pure decisions -------------------------------------------------------------------------------
def secret_problem(secret: dict[str, Any], names: list[str]) -> str | None:
    """Why an existing Secret's pair cannot be kept (None when it can). A Secret of another type is
    not ours to change (its type is immutable): ``BootstrapInputError``."""
    meta = secret.get("metadata") or {}
    where = f"Secret {meta.get('namespace')}/{meta.get('name')}"
    if secret.get("type") != SECRET_TYPE:
        raise BootstrapInputError(f"{where} has type {secret.get('type')!r}, not {SECRET_TYPE!r}; it is not a "
                                  "serving certificate this command may replace: delete it or name another "
                                  "--secret-name")
    data = secret.get("data") or {}
    missing = [k for k in DATA_KEYS if not data.get(k)]
    if missing:
        return f"it has no {', '.join(missing)}"
    try:
        cert, key, ca = (base64.b64decode(data[k], validate=True) for k in DATA_KEYS)
    except ValueError:
        return "its data is not base64"
    return pair_problem(cert, key, ca, names, RENEW_BEFORE)


def _certificates(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def trusts(ca_bundle: str | None, ca_pem: bytes) -> bool:
    """True when the base64 ``caBundle`` holds the CA certificate ``ca_pem`` (among others, maybe)."""
    if not ca_bundle:
        return False
    try:
        bundle = base64.b64decode(ca_bundle, validate=True)
    except ValueError:
        return False
    wanted = _certificates(ca_pem)
    return bool(wanted) and wanted[0] in _certificates(bundle)


def still_valid_ca(ca_pem: bytes) -> bytes | None:
    """``ca_pem`` when it is a certificate that has not expired, else None."""
    certs = _certificates(ca_pem)
    if not certs or certs[0].not_valid_after_utc <= dt.datetime.now(dt.UTC):
        return None
    return ca_pem


def ca_bundle_patch(configuration: dict[str, Any], ca_pem: bytes, bundle_pem: bytes) -> list[dict[str, Any]]:
    """A JSON patch giving every webhook that does not trust ``ca_pem`` the ``caBundle`` ``bundle_pem``
    (empty when all do). Each change is guarded by a ``test`` of the webhook's name, so a list that
    changed since it was read fails the patch instead of touching another webhook."""
    value = base64.b64encode(bundle_pem).decode()
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(configuration.get("webhooks") or []):
        if trusts((hook.get("clientConfig") or {}).get("caBundle"), ca_pem):
            continue
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
        ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
    return ops


def secret_body(target: Target, data: dict[str, bytes], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Secret to create (``base`` None) or the existing one ``base`` with new data (its metadata,
    resourceVersion included, is kept so a concurrent change makes the update fail, not vanish)."""
    body: dict[str, Any] = dict(base) if base else {
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {"name": target.secret_name, "namespace": target.namespace, "labels": dict(LABELS)}}
    body["data"] = {k: base64.b64encode(data[k]).decode() for k in DATA_KEYS}
    return body


# -- the API edge --------------------------------------------------------------------------------
_METHODS = {"mutatingwebhookconfigurations": ("read_mutating_webhook_configuration",
                                              "patch_mutating_webhook_configuration"),
            "validatingwebhookconfigurations": ("read_validating_webhook_configuration",
                                                "patch_validating_webhook_configuration")}


class _Api:
    """The few calls ``bootstrap`` makes, raw JSON in and out, every failure one clear line."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.host = api_client.configuration.host

    def call(self, what: str, fn: Any, *args: Any, expect: tuple[int, ...] = (), **kw: Any) -> tuple[int, Any]:
        """(status, JSON body) of a 2xx answer, or (status, None) for a status in ``expect``; any other
        answer raises ``BootstrapError`` naming ``what`` failed and why."""
        from kubernetes.client.exceptions import ApiException

        from webhook.cluster.live import _describe

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=(5, 30), **kw)
            return resp.status, orjson.loads(resp.data or b"{}")
        except ApiException as exc:
            if exc.status in expect:
                return exc.status, None
            hint = ""
            if exc.status == 403:
                hint = ("; the Job's ServiceAccount lacks this permission (see the Role and ClusterRole in "
                        "manifests/bootstrap/rbac.yaml)")
            raise BootstrapError(f"cannot {what}: {_describe(exc, self.host)}{hint}") from None
        except Exception as exc:  # network and TLS errors, a body that is not JSON
            raise BootstrapError(f"cannot {what}: {_describe(exc, self.host)}") from None


def _issue(target: Target) -> tuple[dict[str, bytes], str]:
    """New data for the Secret (a new CA and a serving pair) and its expiry date for the log."""
    names = service_names(target.service, target.namespace)
    pair = issue(names, days=target.days, common_name=f"{target.service}.{target.namespace}.svc")
    until = x509.load_pem_x509_certificate(pair.cert).not_valid_after_utc
    return {"tls.crt": pair.cert, "tls.key": pair.key, "ca.crt": pair.ca_cert}, f"{until:%Y-%m-%d}"


def _ensure_secret(api: _Api, target: Target) -> tuple[bytes, bytes]:
    """The Secret's CA, and the caBundle the webhooks should get: the CA, plus the previous CA while it
    is valid when the pair was just replaced, so replicas still serving the old certificate stay
    trusted until the kubelet refreshes their volume."""
    names = service_names(target.service, target.namespace)
    where = f"Secret {target.namespace}/{target.secret_name}"
    for _ in range(3):  # another round only after a race with another run (created or deleted meanwhile)
        status, secret = api.call(f"get {where}", api.core.read_namespaced_secret, target.secret_name,
                                  target.namespace, expect=(404,))
        if secret is None:
            data, until = _issue(target)
            status, _ = api.call(f"create {where}", api.core.create_namespaced_secret, target.namespace,
                                 secret_body(target, data), expect=(409,))
            if status == 409:
                log.info("%s was created meanwhile by another run; checking it", where)
                continue
            log.info("created %s: a new CA and a certificate for %s, valid until %s", where, ", ".join(names),
                     until)
            return data["ca.crt"], data["ca.crt"]
        problem = secret_problem(secret, names)
        if problem is None:
            ca = base64.b64decode(secret["data"]["ca.crt"])
            log.info("kept %s: its certificate is valid for %s", where, ", ".join(names))
            return ca, ca
        data, until = _issue(target)
        status, _ = api.call(f"update {where}", api.core.replace_namespaced_secret, target.secret_name,
                             target.namespace, secret_body(target, data, base=secret), expect=(404, 409))
        if status in (404, 409):
            log.info("%s changed while this run replaced it; checking it again", where)
            continue
        log.info("replaced %s (%s): a new CA and a certificate valid until %s", where, problem, until)
        try:
            old_ca = still_valid_ca(base64.b64decode((secret.get("data") or {}).get("ca.crt") or ""))
        except ValueError:
            old_ca = None
        return data["ca.crt"], data["ca.crt"] + (old_ca or b"")
    raise BootstrapError(f"{where} kept changing while this run checked it; run again")


def _patch_configuration(api: _Api, resource: str, name: str, ca: bytes, bundle: bytes) -> None:
    kind = CONFIGURATION_KINDS[resource]
    read, patch = (getattr(api.admission, m) for m in _METHODS[resource])
    _, config = api.call(f"get {kind} {name}", read, name, expect=(404,))
    if config is None:
        raise BootstrapError(f"{kind} {name} not found: it is applied together with this Job "
                             "(kubectl apply -k manifests/); the Job retries")
    hooks = config.get("webhooks") or []
    if not hooks:
        raise BootstrapInputError(f"{kind} {name} has no webhooks to give the CA to")
    ops = ca_bundle_patch(config, ca, bundle)
    if not ops:
        log.info("%s %s already trusts the CA (%d webhooks)", kind, name, len(hooks))
        return
    # 422: a guarding test failed, the webhooks changed since they were read
    status, _ = api.call(f"patch {kind} {name}", patch, name, ops, _content_type=JSON_PATCH, expect=(404, 422))
    if status in (404, 422):
        raise BootstrapError(f"{kind} {name} changed while this run patched it; the Job retries")
    changed = [op["value"] for op in ops if op["op"] == "test"]
    log.info("set the caBundle of %s %s: %s", kind, name, ", ".join(changed))


def bootstrap(api_client: Any, target: Target) -> None:
    """Make the Secret usable and every named configuration trust it; raises ``BootstrapError`` (API)
    or ``BootstrapInputError`` (nothing a retry fixes)."""
    if (why := days_error(target.days)) is not None:
        raise BootstrapInputError(why)
    api = _Api(api_client)
    ca, bundle = _ensure_secret(api, target)
    for resource, name in target.configurations():
        _patch_configuration(api, resource, name, ca, bundle)
