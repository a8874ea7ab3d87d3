"""Only the apiserver gets in, over real TLS on loopback: TLS 1.2 with AEAD suites only and TLS 1.3, mutual TLS
with --client-ca-file (kept across a certificate reload), /metrics on its own plain-HTTP port, and /openapi.json
and /docs only when asked for."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import load_fixture
from tests.serving import Server, run_server
from webhook.cluster.state import ClusterState
from webhook.tls.certs import generate, issue
from webhook.tls.policy import ClientCAError, apply_policy
from webhook.tls.watch import CertWatcher

REVIEW = json.dumps(load_fixture("admission/v1-mutate-create-koord-batch-init-containers.json"))


def handshake(srv: Server, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    ctx.load_verify_locations(cafile=str(srv.certs.ca_cert))
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    return ctx.wrap_socket(sock, server_hostname="localhost")


def client_context(maximum: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    ctx.maximum_version = maximum
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


# -- versions and suites ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES128-SHA"])
def test_tls12_without_aead_is_refused(server: Server, cipher: str) -> None:
    with pytest.raises(ssl.SSLError):
        handshake(server, client_context(ssl.TLSVersion.TLSv1_2, cipher + ":@SECLEVEL=0"))


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                                    "ECDHE-ECDSA-CHACHA20-POLY1305"])
def test_tls12_with_aead_is_accepted(server: Server, cipher: str) -> None:
    with handshake(server, client_context(ssl.TLSVersion.TLSv1_2, cipher)) as sock:
        negotiated = sock.cipher()
        assert sock.version() == "TLSv1.2" and negotiated is not None and negotiated[0] == cipher


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls13_is_accepted_and_tls11_refused(server: Server) -> None:
    with handshake(server, client_context(ssl.TLSVersion.TLSv1_3)) as sock:
        assert sock.version() == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        handshake(server, client_context(ssl.TLSVersion.TLSv1_1, "DEFAULT:@SECLEVEL=0"))


# -- mutual TLS -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def apiserver_client(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A client CA with the apiserver's client certificate, and a certificate from another CA."""
    folder = tmp_path_factory.mktemp("client-ca")
    ours, other = issue(["kube-apiserver"], client=True), issue(["intruder"], client=True)
    files = {"ca": ours.ca_cert, "cert": ours.cert, "key": ours.key, "other-cert": other.cert,
             "other-key": other.key}
    paths = {}
    for name, data in files.items():
        paths[name] = folder / f"{name}.pem"
        paths[name].write_bytes(data)
    return paths


@pytest.fixture()
def mtls_server(example_state: ClusterState, cert_dir: Path, apiserver_client: dict[str, Path]) -> Iterator[Server]:
    with run_server(example_state, cert_dir, client_ca=apiserver_client["ca"]) as srv:
        yield srv


def _post(srv: Server, cert: tuple[Path, Path] | None) -> httpx.Response:
    verify = ssl.create_default_context(cafile=str(srv.certs.ca_cert))
    if cert:
        verify.load_cert_chain(*cert)
    with httpx.Client(base_url=srv.url, verify=verify, timeout=10) as c:
        return c.post("/mutate", content=REVIEW)


def test_mtls_accepts_the_apiservers_certificate(mtls_server: Server, apiserver_client: dict[str, Path]) -> None:
    r = _post(mtls_server, (apiserver_client["cert"], apiserver_client["key"]))
    assert r.status_code == 200 and r.json()["response"]["allowed"]


def test_mtls_refuses_a_review_without_a_certificate_but_answers_probes(mtls_server: Server) -> None:
    r = _post(mtls_server, None)
    assert r.status_code == 403
    assert "client certificate" in r.json()["error"] and "--client-ca-file" in r.json()["error"]
    with mtls_server.client() as c:  # the kubelet's probes present none
        assert c.get("/healthz").text == "ok"
        assert c.get("/readyz").status_code == 200


def test_mtls_refuses_a_certificate_from_another_ca(mtls_server: Server, apiserver_client: dict[str, Path]) -> None:
    with pytest.raises(httpx.HTTPError):
        _post(mtls_server, (apiserver_client["other-cert"], apiserver_client["other-key"]))


def test_the_client_ca_survives_a_certificate_reload(mtls_server: Server, apiserver_client: dict[str, Path],
                                                     tmp_path: Path) -> None:
    renewed = generate(tmp_path, ["localhost", "127.0.0.1"])
    context = mtls_server.server.config.ssl
    assert context is not None
    assert CertWatcher(context, renewed.cert, renewed.key).reload()
    verify = ssl.create_default_context(cafile=str(renewed.ca_cert))
    verify.load_cert_chain(apiserver_client["cert"], apiserver_client["key"])
    with httpx.Client(base_url=mtls_server.url, verify=verify, timeout=10) as c:
        assert c.post("/mutate", content=REVIEW).status_code == 200
    bare = ssl.create_default_context(cafile=str(renewed.ca_cert))
    with httpx.Client(base_url=mtls_server.url, verify=bare, timeout=10) as c:
        assert c.post("/mutate", content=REVIEW).status_code == 403
    other = ssl.create_default_context(cafile=str(renewed.ca_cert))
    other.load_cert_chain(apiserver_client["other-cert"], apiserver_client["other-key"])
    with pytest.raises(httpx.HTTPError), httpx.Client(base_url=mtls_server.url, verify=other, timeout=10) as c:
        c.post("/mutate", content=REVIEW)


def test_a_client_ca_file_that_is_no_ca_is_refused(tmp_path: Path) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    for name, why in (("missing.pem", "cannot read"), ("empty.pem", "no PEM certificate"),
                      ("garbage.pem", "not a usable CA certificate")):
        with pytest.raises(ClientCAError, match=why):
            apply_policy(context, tmp_path / name)


# -- the metrics port and the OpenAPI pages ------------------------------------------------------------
def test_metrics_are_on_their_own_plain_http_port(server: Server) -> None:
    r = httpx.get(server.metrics_url, timeout=10)
    assert r.status_code == 200 and "controller_runtime_webhook_requests_total" in r.text
    assert httpx.get(server.metrics_url.replace("/metrics", "/healthz"), timeout=10).status_code == 404
    with server.client() as c:  # not on the admission port
        assert c.get("/metrics").status_code == 404


def test_openapi_and_docs_only_when_asked_for(server: Server, example_state: ClusterState, cert_dir: Path) -> None:
    with server.client() as c:
        assert c.get("/openapi.json").status_code == 404
        assert c.get("/docs").status_code == 404
    with run_server(example_state, cert_dir, openapi=True) as srv, srv.client() as c:
        assert "/mutate" in c.get("/openapi.json").json()["paths"]
        assert c.get("/docs").status_code == 200
