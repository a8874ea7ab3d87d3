"""``colocation-webhook certs bootstrap`` (the install's Job) against a local API server.

The server answers like kube-apiserver for the objects the command touches: Secrets in one namespace
(get, create, update with resourceVersion checks) and the two webhook configurations (get, JSON patch
with ``test`` operations), every answer in a recorded shape (tests/fixtures/api: the 201 of a create,
the 404/409/422 Status bodies). The command runs in-process, as the Job runs it, from a kubeconfig that
points at that server; nothing of ours is replaced.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from cryptography import x509

from harness.apiserver import Received, ReplayAPIServer, Route, load_exchange
from webhook.cli.webhook import main
from webhook.tls.bootstrap import ApiCall, Target, api_calls
from webhook.tls.certs import generate, service_names

ROOT = Path(__file__).resolve().parents[2]
NS, SERVICE, SECRET = "colocation-system", "colocation-webhook", "colocation-webhook-tls"
CONFIG = "colocation-webhook"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
KINDS = {"mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
         "validatingwebhookconfigurations": "ValidatingWebhookConfiguration"}
ARGS = ["certs", "bootstrap", "--namespace", NS, "--service", SERVICE, "--secret-name", SECRET,
        "--mutating-webhook-configuration", CONFIG, "--validating-webhook-configuration", CONFIG]
TARGET = Target(namespace=NS, service=SERVICE, secret_name=SECRET, mutating=CONFIG, validating=CONFIG)


def _status(code: int, reason: str, message: str, name: str, kind: str) -> dict[str, Any]:
    """A Status body in the recorded shape (the 404 of a missing ConfigMap), for another code and text."""
    body: dict[str, Any] = copy.deepcopy(load_exchange("configmaps-get-missing-404")["response"]["body"])
    body.update(code=code, reason=reason, message=message, details={"name": name, "kind": kind})
    return body


class Cluster:
    """The apiserver's reactions for the Secret and the webhook configurations."""

    def __init__(self, server: ReplayAPIServer) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.forbidden: set[tuple[str, str]] = set()  # (method, path) answered 403
        self._rv = itertools.count(1000)
        created = load_exchange("configmaps-create-slo-controller-config")["response"]["body"]["metadata"]
        self._meta_shape = {k: created[k] for k in ("uid", "creationTimestamp")}
        server.add_handler("GET", f"{SECRETS}/{SECRET}", self.get)
        server.add_handler("PUT", f"{SECRETS}/{SECRET}", self.update)
        server.add_handler("POST", SECRETS, self.create)
        for resource in KINDS:
            server.add_handler("GET", f"{ADMISSION}/{resource}/{CONFIG}", self.get)
            server.add_handler("PATCH", f"{ADMISSION}/{resource}/{CONFIG}", self.patch)

    # -- state ----------------------------------------------------------------------------------
    def store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        for k, v in self._meta_shape.items():
            meta.setdefault(k, v)
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[path] = obj
        return obj

    def add_configurations(self, ca_bundle: str | None = None) -> None:
        """Our two configurations as manifests/base declares them (no caBundle unless given)."""
        for doc in yaml.safe_load_all((ROOT / "manifests" / "base" / "webhook-configurations.yaml").read_text()):
            resource = next(r for r, k in KINDS.items() if k == doc["kind"])
            if ca_bundle is not None:
                for hook in doc["webhooks"]:
                    hook["clientConfig"]["caBundle"] = ca_bundle
            self.store(f"{ADMISSION}/{resource}/{doc['metadata']['name']}", doc)

    def secret(self) -> dict[str, Any] | None:
        return self.objects.get(f"{SECRETS}/{SECRET}")

    def secret_data(self) -> dict[str, bytes]:
        secret = self.secret()
        assert secret is not None
        return {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def ca_bundles(self) -> dict[str, list[bytes]]:
        out = {}
        for resource, kind in KINDS.items():
            config = self.objects[f"{ADMISSION}/{resource}/{CONFIG}"]
            out[kind] = [base64.b64decode(h["clientConfig"].get("caBundle", "")) for h in config["webhooks"]]
        return out

    # -- reactions ------------------------------------------------------------------------------
    @staticmethod
    def _resource(path: str) -> tuple[str, str]:
        parts = path.rstrip("/").split("/")
        return (parts[-1], "") if parts[-1] in ("secrets", *KINDS) else (parts[-2], parts[-1])

    def _denied(self, r: Received, verb: str) -> tuple[int, Any] | None:
        if (r.method, r.path) not in self.forbidden:
            return None
        resource, name = self._resource(r.path)
        scope = f' in the namespace "{NS}"' if resource == "secrets" else " at the cluster scope"
        group = "" if resource == "secrets" else "admissionregistration.k8s.io"
        return 403, _status(403, "Forbidden", f'{resource} "{name}" is forbidden: User '
                            f'"system:serviceaccount:{NS}:colocation-webhook-certs" cannot {verb} resource '
                            f'"{resource}" in API group "{group}"{scope}', name, resource)

    def get(self, r: Received) -> tuple[int, Any]:
        if denied := self._denied(r, "get"):
            return denied
        resource, name = self._resource(r.path)
        if r.path not in self.objects:
            return 404, _status(404, "NotFound", f'{resource} "{name}" not found', name, resource)
        return 200, self.objects[r.path]

    def create(self, r: Received) -> tuple[int, Any]:
        if denied := self._denied(r, "create"):
            return denied
        name = r.body["metadata"]["name"]
        path = f"{r.path}/{name}"
        if path in self.objects:
            return 409, _status(409, "AlreadyExists", f'secrets "{name}" already exists', name, "secrets")
        return 201, self.store(path, r.body)

    def update(self, r: Received) -> tuple[int, Any]:
        if denied := self._denied(r, "update"):
            return denied
        _, name = self._resource(r.path)
        current = self.objects.get(r.path)
        if current is None:
            return 404, _status(404, "NotFound", f'secrets "{name}" not found', name, "secrets")
        if r.body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on secrets "{name}": the object '
                                "has been modified; please apply your changes to the latest version and try again",
                                name, "secrets")
        return 200, self.store(r.path, r.body)

    def patch(self, r: Received) -> tuple[int, Any]:
        if denied := self._denied(r, "patch"):
            return denied
        assert r.headers.get("Content-Type") == "application/json-patch+json"
        current = self.objects.get(r.path)
        if current is None:
            return self.get(r)
        try:
            patched = jsonpatch.apply_patch(current, r.body)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
            return 422, load_exchange("nodes-status-patch-jsonpatch-remove-missing")["response"]["body"]
        return 200, self.store(r.path, patched)


@pytest.fixture()
def api(tmp_path: Path, restore_logging: None) -> Iterator[tuple[ReplayAPIServer, Cluster, Path]]:
    with ReplayAPIServer() as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "replay",
            "clusters": [{"name": "replay", "cluster": {"server": server.url}}],
            "users": [{"name": "job", "user": {"token": "t"}}],
            "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "job"}}],
        }))
        yield server, Cluster(server), kubeconfig


def _run(kubeconfig: Path, *extra: str) -> int:
    return main([*ARGS, "--kubeconfig", str(kubeconfig), *extra])


def _as_call(r: Received) -> ApiCall:
    """The RBAC terms of a request the command sent."""
    verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[r.method]
    parts = r.path.strip("/").split("/")
    if parts[0] == "api":  # /api/v1/namespaces/NS/secrets[/NAME]
        return parts[3], "", parts[4], verb, tuple(parts[5:6])
    return "*", parts[1], parts[3], verb, tuple(parts[4:5])  # /apis/GROUP/v1/RESOURCE/NAME


def _writes(server: ReplayAPIServer) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in server.received if r.method != "GET"]


def _assert_serving_secret(cluster: Cluster) -> None:
    secret = cluster.secret()
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    data = cluster.secret_data()
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(data["ca.crt"]))
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == service_names(SERVICE, NS)


# -- the Secret --------------------------------------------------------------------------------------
def test_creates_the_secret_and_patches_both_configurations(api: tuple[ReplayAPIServer, Cluster, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    server, cluster, kubeconfig = api
    cluster.add_configurations()
    assert _run(kubeconfig) == 0
    _assert_serving_secret(cluster)
    ca = cluster.secret_data()["ca.crt"]
    assert cluster.ca_bundles() == {kind: [ca] for kind in KINDS.values()}
    leaf = x509.load_pem_x509_certificate(cluster.secret_data()["tls.crt"])
    assert leaf.not_valid_after_utc - dt.datetime.now(dt.UTC) > dt.timedelta(days=3600)  # --days 3650
    assert _writes(server) == [("POST", SECRETS), ("PATCH", f"{ADMISSION}/mutatingwebhookconfigurations/{CONFIG}"),
                               ("PATCH", f"{ADMISSION}/validatingwebhookconfigurations/{CONFIG}")]
    err = capsys.readouterr().err
    assert f"created Secret {NS}/{SECRET}" in err
    assert f"set the caBundle of MutatingWebhookConfiguration {CONFIG}: mutate-pods.colocation.koordinator.sh" in err
    # Every request is one the Job's RBAC allows (test_deploy_manifests checks the RBAC is exactly these).
    assert {_as_call(r) for r in server.received} <= api_calls(TARGET)


def test_a_second_run_changes_nothing(api: tuple[ReplayAPIServer, Cluster, Path]) -> None:
    server, cluster, kubeconfig = api
    cluster.add_configurations()
    assert _run(kubeconfig) == 0
    before = copy.deepcopy(cluster.objects)
    server.received.clear()
    assert _run(kubeconfig) == 0
    assert _writes(server) == []
    assert cluster.objects == before


def test_reuses_a_valid_secret_and_only_patches_the_configurations(
        api: tuple[ReplayAPIServer, Cluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, cluster, kubeconfig = api
    paths = generate(tmp_path / "pair", service_names(SERVICE, NS), days=365)
    files = {"tls.crt": paths.cert, "tls.key": paths.key, "ca.crt": paths.ca_cert}
    cluster.store(f"{SECRETS}/{SECRET}", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": SECRET, "namespace": NS},
        "data": {k: base64.b64encode(p.read_bytes()).decode() for k, p in files.items()}})
    kept = copy.deepcopy(cluster.secret())
    cluster.add_configurations()
    assert _run(kubeconfig) == 0
    assert cluster.secret() == kept
    assert cluster.ca_bundles() == {kind: [paths.ca_cert.read_bytes()] for kind in KINDS.values()}
    assert [m for m, _ in _writes(server)] == ["PATCH", "PATCH"]
    assert f"kept Secret {NS}/{SECRET}" in capsys.readouterr().err


def _keep(data: dict[str, bytes], other: dict[str, bytes]) -> None:
    pass


@pytest.mark.parametrize(("name", "service", "days", "spoil", "reason"), [
    ("a key that does not match", SERVICE, 365, lambda d, o: d.update({"tls.key": o["tls.key"]}), "does not match"),
    ("another service's names", "other", 365, _keep, "does not name colocation-webhook"),
    ("expiring within 30 days", SERVICE, 20, _keep, "within 30 days"),
    ("no ca.crt", SERVICE, 365, lambda d, o: d.pop("ca.crt"), "it has no ca.crt"),
    ("a CA that did not issue it", SERVICE, 365, lambda d, o: d.update({"ca.crt": o["ca.crt"]}), "not issued by the CA"),
])
def test_replaces_an_unusable_secret_and_trusts_both_cas_meanwhile(
        api: tuple[ReplayAPIServer, Cluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        name: str, service: str, days: int, spoil: Any, reason: str) -> None:
    server, cluster, kubeconfig = api
    pair = generate(tmp_path / "old", service_names(service, NS), days=days)
    other = generate(tmp_path / "other", service_names(service, NS))
    data = {"tls.crt": pair.cert.read_bytes(), "tls.key": pair.key.read_bytes(), "ca.crt": pair.ca_cert.read_bytes()}
    spoil(data, {"tls.key": other.key.read_bytes(), "ca.crt": other.ca_cert.read_bytes()})
    cluster.store(f"{SECRETS}/{SECRET}", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": SECRET, "namespace": NS, "labels": {"keep": "me"}},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
    old_ca = data.get("ca.crt")
    cluster.add_configurations(ca_bundle=base64.b64encode(old_ca).decode() if old_ca else None)
    assert _run(kubeconfig) == 0, name
    _assert_serving_secret(cluster)
    new = cluster.secret_data()
    assert new["tls.crt"] != data["tls.crt"] and new["ca.crt"] != old_ca
    secret = cluster.secret()
    assert secret is not None and secret["metadata"]["labels"] == {"keep": "me"}  # updated, not re-created
    # Replicas serving the old certificate stay trusted until the kubelet refreshes their volume.
    expected = new["ca.crt"] + (old_ca or b"")
    assert cluster.ca_bundles() == {kind: [expected] for kind in KINDS.values()}, name
    assert [m for m, _ in _writes(server)] == ["PUT", "PATCH", "PATCH"]
    assert reason in capsys.readouterr().err, name


def test_a_secret_of_another_type_is_unusable_input(api: tuple[ReplayAPIServer, Cluster, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    server, cluster, kubeconfig = api
    cluster.store(f"{SECRETS}/{SECRET}", {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                          "metadata": {"name": SECRET, "namespace": NS}, "data": {}})
    cluster.add_configurations()
    assert _run(kubeconfig) == 2
    err = capsys.readouterr().err
    assert f"Secret {NS}/{SECRET} has type 'Opaque', not 'kubernetes.io/tls'" in err
    assert _writes(server) == []


def test_losing_a_create_race_reuses_the_winner(api: tuple[ReplayAPIServer, Cluster, Path],
                                                tmp_path: Path) -> None:
    """Another run created the Secret between this run's get and create: 409, then it is read and kept."""
    server, cluster, kubeconfig = api
    cluster.add_configurations()
    theirs = generate(tmp_path / "theirs", service_names(SERVICE, NS))
    files = {"tls.crt": theirs.cert, "tls.key": theirs.key, "ca.crt": theirs.ca_cert}
    cluster.store(f"{SECRETS}/{SECRET}", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": SECRET, "namespace": NS},
        "data": {k: base64.b64encode(p.read_bytes()).decode() for k, p in files.items()}})
    kept = copy.deepcopy(cluster.secret())
    # This run's first read happened before the other run's create.
    server.routes.insert(0, Route(method="GET", path=f"{SECRETS}/{SECRET}", status=404, times=1, body=_status(
        404, "NotFound", f'secrets "{SECRET}" not found', SECRET, "secrets")))
    assert _run(kubeconfig) == 0
    assert [(r.method, r.path) for r in server.received][:3] == [
        ("GET", f"{SECRETS}/{SECRET}"), ("POST", SECRETS), ("GET", f"{SECRETS}/{SECRET}")]
    assert cluster.secret() == kept
    assert cluster.ca_bundles() == {kind: [theirs.ca_cert.read_bytes()] for kind in KINDS.values()}


# -- failures ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "what"), [
    ("GET", f"{SECRETS}/{SECRET}", f"cannot get Secret {NS}/{SECRET}: HTTP 403 Forbidden: secrets \"{SECRET}\" is "
                                   "forbidden: User \"system:serviceaccount:colocation-system:colocation-webhook-certs\" "
                                   "cannot get resource \"secrets\""),
    ("POST", SECRETS, f"cannot create Secret {NS}/{SECRET}: HTTP 403 Forbidden"),
    ("PATCH", f"{ADMISSION}/validatingwebhookconfigurations/{CONFIG}",
     f"cannot patch ValidatingWebhookConfiguration {CONFIG}: HTTP 403 Forbidden: validatingwebhookconfigurations "
     f"\"{CONFIG}\" is forbidden"),
])
def test_a_403_fails_clearly(api: tuple[ReplayAPIServer, Cluster, Path], capsys: pytest.CaptureFixture[str],
                             method: str, path: str, what: str) -> None:
    _server, cluster, kubeconfig = api
    cluster.add_configurations()
    cluster.forbidden.add((method, path))
    assert _run(kubeconfig) == 1
    err = capsys.readouterr().err
    assert what in err, err
    assert "the Job's ServiceAccount lacks this permission" in err and "manifests/bootstrap/rbac.yaml" in err


def test_a_missing_configuration_fails_for_the_job_to_retry(api: tuple[ReplayAPIServer, Cluster, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _server, cluster, kubeconfig = api
    assert _run(kubeconfig) == 1
    err = capsys.readouterr().err
    assert f"MutatingWebhookConfiguration {CONFIG} not found" in err and "the Job retries" in err
    assert cluster.secret() is not None  # the Secret is made first; the retry keeps it


def test_an_unreachable_api_server_fails_clearly(tmp_path: Path, restore_logging: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayAPIServer() as server:
        url = server.url
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}], "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    assert _run(kubeconfig) == 1
    assert f"cannot get Secret {NS}/{SECRET}: cannot reach the API server at {url}" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "error"), [
    (["--days", "0"], "--days must be at least 1, got 0"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load kubeconfig /nonexistent/kubeconfig"),
])
def test_unusable_input_exits_2(tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str],
                                extra: list[str], error: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    assert main([*ARGS, "--kubeconfig", str(kubeconfig), *extra]) == 2
    assert error in capsys.readouterr().err
