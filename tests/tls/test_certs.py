"""``colocation-webhook certs`` and the serving-certificate hot reload, over real HTTPS."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.serving import free_port
from webhook.cli.webhook import main
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.server.app import create_app
from webhook.tls.certs import CertPaths, CertsError, check_pair, generate, service_names
from webhook.tls.pair import served
from webhook.tls.watch import CertWatcher, WatchingServer, pair_unusable

SERVICE_NAMES = ["colocation-webhook", "colocation-webhook.koordinator-system",
                 "colocation-webhook.koordinator-system.svc",
                 "colocation-webhook.koordinator-system.svc.cluster.local"]


def _gen(out: Path, *extra: str, service: str = "colocation-webhook") -> int:
    return main(["certs", "generate", "--service", service, "--namespace", "koordinator-system",
                 "--out", str(out), *extra])


def _sans(path: Path) -> list[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


# -- certs generate / ca-bundle -----------------------------------------------------------------
def test_generate_writes_service_sans_and_private_keys(tmp_path: Path) -> None:
    assert _gen(tmp_path / "certs") == 0
    paths = CertPaths(tmp_path / "certs")
    assert _sans(paths.cert) == SERVICE_NAMES == service_names("colocation-webhook", "koordinator-system")
    for key in (paths.key, paths.ca_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    leaf = x509.load_pem_x509_certificate(paths.cert.read_bytes())
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    days = (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days
    assert 364 <= days <= 366


def test_generate_days(tmp_path: Path) -> None:
    assert _gen(tmp_path, "--days", "30") == 0
    leaf = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days == 30
    assert _gen(tmp_path / "zero", "--days", "0", "--force") == 2


@pytest.mark.parametrize(("name", "second", "exit_code", "cert_replaced", "ca_replaced"), [
    ("same names: kept", [], 0, False, False),
    ("other names: refused", ["--service", "other"], 2, False, False),
    ("other names with --force: replaced, CA kept", ["--service", "other", "--force"], 0, True, False),
    ("--force: new leaf, same CA", ["--force"], 0, True, False),
    ("--force --new-ca: both new", ["--force", "--new-ca"], 0, True, True),
])
def test_generate_refuses_to_overwrite_a_valid_pair(tmp_path: Path, name: str, second: list[str], exit_code: int,
                                                    cert_replaced: bool, ca_replaced: bool) -> None:
    assert _gen(tmp_path) == 0
    before = {n: (tmp_path / n).read_bytes() for n in ("tls.crt", "tls.key", "ca.crt", "ca.key")}
    service = "colocation-webhook"
    if "--service" in second:
        i = second.index("--service")
        service = second[i + 1]
        second = second[:i] + second[i + 2:]
    assert _gen(tmp_path, *second, service=service) == exit_code, name
    after = {n: (tmp_path / n).read_bytes() for n in before}
    assert (after["tls.crt"] != before["tls.crt"]) == cert_replaced, name
    assert (after["tls.key"] != before["tls.key"]) == cert_replaced, name
    assert (after["ca.crt"] != before["ca.crt"]) == ca_replaced, name
    ca = x509.load_pem_x509_certificate(after["ca.crt"])
    x509.load_pem_x509_certificate(after["tls.crt"]).verify_directly_issued_by(ca)


def test_generate_replaces_a_broken_pair_without_force(tmp_path: Path) -> None:
    assert _gen(tmp_path) == 0
    (tmp_path / "tls.key").write_text("not a key")
    assert _gen(tmp_path) == 0
    check_pair((tmp_path / "tls.crt").read_bytes(), (tmp_path / "tls.key").read_bytes())


def test_ca_bundle_prints_base64_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _gen(tmp_path) == 0
    capsys.readouterr()
    assert main(["certs", "ca-bundle", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip()
    assert base64.b64decode(out) == (tmp_path / "ca.crt").read_bytes()


def test_ca_bundle_missing_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "ca-bundle", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "ca.crt: not found" in err and "certs generate" in err


# -- check_pair -------------------------------------------------------------------------------------
def _self_signed(days_from: int, days_to: int) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now + dt.timedelta(days=days_from))
            .not_valid_after(now + dt.timedelta(days=days_to)).sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_check_pair() -> None:
    good_cert, good_key = _self_signed(-1, 1)
    _other_cert, other_key = _self_signed(-1, 1)
    expired_cert, expired_key = _self_signed(-3, -1)
    cases = [
        ("good", good_cert, good_key, None),
        ("key of another cert", good_cert, other_key, "does not match"),
        ("garbage certificate", b"nope", good_key, "certificate does not parse"),
        ("garbage key", good_cert, b"nope", "private key does not parse"),
        ("empty certificate", b"", good_key, "certificate does not parse"),
        ("expired", expired_cert, expired_key, "not valid now"),
    ]
    for name, cert, key, error in cases:
        if error is None:
            check_pair(cert, key)
            continue
        with pytest.raises(CertsError, match=error):
            check_pair(cert, key)
        assert name


def test_openssl_alone_checks_a_pair_as_check_pair_does(tmp_path: Path) -> None:
    """serve checks its pair without loading cryptography (webhook.tls.pair): OpenSSL must refuse what check_pair
    refuses, give the same expiry and serial, and a refused pair is still explained in check_pair's words."""
    good_cert, good_key = _self_signed(-1, 1)
    _other_cert, other_key = _self_signed(-1, 1)
    cases = [("key of another cert", good_cert, other_key, "does not match"),
             ("garbage certificate", b"nope", good_key, "certificate does not parse"),
             ("garbage key", good_cert, b"nope", "private key does not parse"),
             ("expired", *_self_signed(-3, -1), "not valid now"),
             ("not yet valid", *_self_signed(1, 3), "not valid now")]
    for name, cert, key, error in [("good", good_cert, good_key, None), *cases]:
        (tmp_path / "c.pem").write_bytes(cert)
        (tmp_path / "k.pem").write_bytes(key)
        reason = pair_unusable(tmp_path / "c.pem", tmp_path / "k.pem")
        if error is None:
            assert reason is None
            leaf = x509.load_pem_x509_certificate(cert)
            got = served(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"), cert)
            assert got.not_after == leaf.not_valid_after_utc.replace(microsecond=0).timestamp()
            assert int(got.serial, 16) == leaf.serial_number
            continue
        with pytest.raises((ssl.SSLError, ValueError)):
            served(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"), cert)
        assert reason is not None and error in reason, name


# -- hot reload over real HTTPS ---------------------------------------------------------------------
def _publish(mount: Path, version: str, source: Path) -> None:
    """Update ``mount`` the way the kubelet updates a Secret volume: a new ``..<version>`` folder, then an
    atomic rename of the ``..data`` symlink; ``tls.crt``/``tls.key`` are symlinks through ``..data``."""
    target = mount / f"..{version}"
    target.mkdir()
    for n in ("tls.crt", "tls.key"):
        shutil.copyfile(source / n, target / n)
    tmp = mount / "..data_tmp"
    tmp.symlink_to(target.name)
    tmp.replace(mount / "..data")
    for n in ("tls.crt", "tls.key"):
        if not (mount / n).is_symlink():
            (mount / n).symlink_to(f"..data/{n}")


def _served_serial(port: int, trust: ssl.SSLContext) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            trust.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


@contextlib.contextmanager
def _watching_server(mount: Path) -> Iterator[tuple[int, WatchingServer]]:
    state = ClusterState(WEBHOOK_KINDS)
    state.replace_all({})
    port = free_port()
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=port, ssl_certfile=str(mount / "tls.crt"),
                            ssl_keyfile=str(mount / "tls.key"), log_config=None, access_log=False, lifespan="off")
    config.load()
    assert config.ssl is not None
    server = WatchingServer(config, CertWatcher(config.ssl, mount / "tls.crt", mount / "tls.key", poll_seconds=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield port, server
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _Load:
    """Requests in a loop on two threads: a new TLS connection for each, and one keep-alive client."""

    def __init__(self, port: int, cafile: str) -> None:
        self.url = f"https://localhost:{port}/healthz"
        self.cafile = cafile
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(fresh,), daemon=True) for fresh in (True, False)]

    def _loop(self, fresh: bool) -> None:
        verify = ssl.create_default_context(cafile=self.cafile)
        keep = httpx.Client(verify=verify, timeout=5)
        while not self._stop.is_set():
            try:
                if fresh:
                    with httpx.Client(verify=verify, timeout=5) as c:
                        r = c.get(self.url)
                else:
                    r = keep.get(self.url)
                if r.status_code == 200 and r.text == "ok":
                    self.ok += 1
                else:
                    self.failures.append(f"HTTP {r.status_code}")
            except Exception as exc:  # the test counts every kind of failure
                self.failures.append(repr(exc))
        keep.close()

    def __enter__(self) -> _Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)


def _wait_for(predicate: Callable[[], object], what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_rotation_under_load_has_no_failed_request(tmp_path: Path) -> None:
    names = ["localhost", "127.0.0.1"]
    old, new = generate(tmp_path / "old", names), generate(tmp_path / "new", names)
    # Clients trust both CAs, as a caBundle does during a CA change.
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(old.ca_cert.read_bytes() + new.ca_cert.read_bytes())
    trust = ssl.create_default_context(cafile=str(bundle))
    mount = tmp_path / "mount"
    mount.mkdir()
    _publish(mount, "v1", old.folder)
    with _watching_server(mount) as (port, _server):
        assert _served_serial(port, trust) == _serial(old.cert)
        with _Load(port, str(bundle)) as load:
            _wait_for(lambda: load.ok >= 20, "requests before the swap")
            _publish(mount, "v2", new.folder)
            _wait_for(lambda: _served_serial(port, trust) == _serial(new.cert), "the new certificate")
            seen = load.ok
            _wait_for(lambda: load.ok >= seen + 20, "requests after the swap")
        assert load.failures == []
        assert load.ok > 40


def test_broken_new_pair_keeps_the_old_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    names = ["localhost", "127.0.0.1"]
    good, other = generate(tmp_path / "good", names), generate(tmp_path / "other", names)
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copyfile(other.cert, broken / "tls.crt")
    shutil.copyfile(good.key, broken / "tls.key")  # a key that does not match the certificate
    trust = ssl.create_default_context(cafile=str(good.ca_cert))
    mount = tmp_path / "mount"
    mount.mkdir()
    _publish(mount, "v1", good.folder)
    with _watching_server(mount) as (port, server):
        with _Load(port, str(good.ca_cert)) as load:
            _publish(mount, "v2", broken)
            _wait_for(lambda: "not usable" in caplog.text, "the broken pair to be reported")
            assert "does not match the certificate" in caplog.text
            seen = load.ok
            _wait_for(lambda: load.ok >= seen + 20, "requests after the broken swap")
            assert _served_serial(port, trust) == _serial(good.cert)
        assert load.failures == []
        assert server.watcher is not None and server.watcher.reload() is False  # reported once, not re-tried
        # Fixed afterwards: the next change loads it.
        _publish(mount, "v3", other.folder)
        trust_other = ssl.create_default_context(cafile=str(other.ca_cert))
        _wait_for(lambda: _try_connect(port, trust_other) == _serial(other.cert), "the fixed pair")


def test_unchanged_files_are_not_reloaded(tmp_path: Path) -> None:
    paths = generate(tmp_path, ["localhost"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths.cert, paths.key)
    watcher = CertWatcher(ctx, paths.cert, paths.key)
    assert watcher.reload(initial=True) is True
    assert watcher.reload() is False  # a poll with nothing new
    generate(tmp_path, ["localhost"])
    assert watcher.reload() is True


def test_serve_reloads_renewed_files(tmp_path: Path) -> None:
    """`colocation-webhook serve --tls-cert-file/--tls-private-key-file` starts the watcher: files renewed
    in place (as `certs generate --force` does) are served to new connections without a restart."""
    import os
    import subprocess
    import sys

    from webhook.cluster.sources import example_folder
    from webhook.tls.certs import generate_for_service

    certs = tmp_path / "certs"
    generate(certs, ["localhost", "127.0.0.1"])
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "webhook.cli.webhook", "serve", "--drain-delay", "0", "--host", "127.0.0.1",
                             "--port", str(port), "--metrics-port", "0", "--tls-cert-file", str(certs / "tls.crt"),
                             "--tls-private-key-file", str(certs / "tls.key"), "--cluster-state", str(example_folder())],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        trust = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        _wait_for(lambda: _try_connect(port, trust) == _serial(certs / "tls.crt"), "the server to start")
        first = _serial(certs / "tls.crt")
        # A renewal that keeps the CA: the trust store stays the same.
        generate_for_service(certs, "localhost", "default", force=True)
        assert _serial(certs / "tls.crt") != first
        _wait_for(lambda: _try_connect(port, trust) == _serial(certs / "tls.crt"), "the renewed certificate")
        assert proc.poll() is None, "the server kept running"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "reloaded the TLS certificate" in err


def _try_connect(port: int, trust: ssl.SSLContext) -> int | None:
    try:
        return _served_serial(port, trust)
    except (OSError, ssl.SSLError):
        return None


# -- serve --wait-for-certs (the Deployment mounts the Secret before the bootstrap Job makes it) ----------
def _serve(tmp_path: Path, certs: Path, *extra: str) -> tuple[subprocess.Popen[str], int, Path]:
    from webhook.cluster.sources import example_folder

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "webhook.cli.webhook", "serve", "--drain-delay", "0", "--host", "127.0.0.1",
                             "--port", str(port), "--metrics-port", "0", "--tls-cert-file", str(certs / "tls.crt"),
                             "--tls-private-key-file", str(certs / "tls.key"), "--cluster-state", str(example_folder()),
                             *extra], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)
    return proc, port, log


def test_serve_waits_for_missing_certificates_then_serves_them(tmp_path: Path) -> None:
    certs = tmp_path / "tls"  # an optional Secret volume before the Secret exists: nothing there yet
    proc, port, log = _serve(tmp_path, certs, "--wait-for-certs")
    try:
        _wait_for(lambda: "waiting for the TLS certificate" in log.read_text(), "the waiting message")
        time.sleep(1.5)  # a few polls: still waiting, reported once, nothing listening
        assert proc.poll() is None
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        paths = generate(certs, ["localhost", "127.0.0.1"])
        trust = ssl.create_default_context(cafile=str(paths.ca_cert))
        _wait_for(lambda: _try_connect(port, trust) == _serial(paths.cert), "the server to serve the new pair")
    finally:
        proc.terminate()
        code = proc.wait(timeout=10)
    text = log.read_text()
    assert code == 0
    assert text.count("waiting for the TLS certificate") == 1, text
    assert f"{certs / 'tls.crt'} does not exist yet" in text
    assert "the TLS certificate" in text and "is there" in text


def test_serve_waiting_for_certificates_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    proc, _port, log = _serve(tmp_path, tmp_path / "none", "--wait-for-certs")
    _wait_for(lambda: "waiting for the TLS certificate" in log.read_text(), "the waiting message")
    proc.terminate()
    assert proc.wait(timeout=10) == 0


def test_serve_without_wait_for_certs_exits_2_on_a_missing_certificate(tmp_path: Path) -> None:
    proc, _port, log = _serve(tmp_path, tmp_path / "none")
    assert proc.wait(timeout=30) == 2
    assert f"--tls-cert-file: {tmp_path / 'none' / 'tls.crt'} does not exist" in log.read_text()


def test_wait_for_certs_needs_the_tls_flags(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-m", "webhook.cli.webhook", "serve", "--wait-for-certs"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--wait-for-certs needs --tls-cert-file and --tls-private-key-file" in r.stderr
