"""A real kube-apiserver for the tests that need one (docs/policies.md, "Proving the policies on a real apiserver").

What an apiserver compiles, validates or runs (CRDs, webhook configurations, admission policies, RBAC) is proven
against the apiserver itself. This tier is skipped unless it is pointed at one, in either of two ways:

- ``COLOCATION_TEST_KUBECONFIG``: a kubeconfig of a cluster of one's own (kind, a test cluster) whose user may
  do anything (cluster-admin). The tests create uniquely named namespaces, nodes and cluster-scoped objects, and
  delete them afterwards.
- ``COLOCATION_TEST_APISERVER``: a folder holding a ``kube-apiserver`` binary (1.30 or newer) and an ``etcd``
  (or ``etcd`` on PATH). The tier then starts etcd and the apiserver itself on loopback, with throw-away
  certificates, RBAC, service-account tokens and no controller manager (as controller-runtime's envtest does),
  and stops them at the end. Nothing of the apiserver's source, its binaries or how they were built belongs in
  this repository.

Either way the tests talk to it with ``kubectl`` (server-side apply, dry-run, tokens) and with the official client.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

KUBECONFIG_ENV = "COLOCATION_TEST_KUBECONFIG"
ASSETS_ENV = "COLOCATION_TEST_APISERVER"
MIN_MINOR = 30  # ValidatingAdmissionPolicy v1, pod-bound tokens carrying the node


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    version: str          # gitVersion, as /version says
    minor: int
    started: bool         # started by the tier (no controller manager: no default service account, no GC)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise RuntimeError("kubectl is not on PATH")
        done = subprocess.run([kubectl, "--kubeconfig", str(self.kubeconfig), *args], input=input,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    def through(self, port: int, into: Path) -> Path:
        """A copy of the kubeconfig at ``into`` that reaches the apiserver (on loopback) through ``port``: a TCP
        proxy's (harness/tcp_proxy.py)."""
        into.write_text(self.kubeconfig.read_text().replace(f"127.0.0.1:{self.port}", f"127.0.0.1:{port}"))
        return into

    @property
    def port(self) -> int:
        """The apiserver's port on loopback, as the kubeconfig names it."""
        found = re.search(r"https://127\.0\.0\.1:(\d+)", self.kubeconfig.read_text())
        if found is None:
            raise RuntimeError(f"{self.kubeconfig}: no server on 127.0.0.1")
        return int(found.group(1))


def wait_until(what: str, ready: Callable[[], bool], seconds: float = 60) -> None:
    """Poll ``ready`` until it holds: the apiserver acts on a new or deleted policy binding only once its informer
    has it."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"the apiserver did not act on {what} within {seconds:.0f} s")
        time.sleep(0.25)


def skip_reason() -> str | None:
    """Why the tier cannot run here, or None."""
    if os.environ.get(KUBECONFIG_ENV):
        path = Path(os.environ[KUBECONFIG_ENV])
        return None if path.is_file() else f"{KUBECONFIG_ENV}={path}: no such file"
    if not os.environ.get(ASSETS_ENV):
        return (f"no real kube-apiserver: set {KUBECONFIG_ENV} to a cluster's kubeconfig, or {ASSETS_ENV} to a "
                "folder with kube-apiserver (1.30+) and etcd (docs/policies.md, \"Proving the policies on a real "
                "apiserver\")")
    assets = Path(os.environ[ASSETS_ENV])
    if not (assets / "kube-apiserver").is_file():
        return f"{ASSETS_ENV}={assets}: no kube-apiserver in it"
    if _etcd(assets) is None:
        return f"{ASSETS_ENV}={assets}: no etcd in it nor on PATH"
    if shutil.which("kubectl") is None:
        return "kubectl is not on PATH"
    return None


def _etcd(assets: Path) -> str | None:
    return str(assets / "etcd") if (assets / "etcd").is_file() else shutil.which("etcd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, ca: bool, sans: list[x509.GeneralName] | None = None,
          client: bool = False) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + dt.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if not ca:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pki(folder: Path) -> None:
    """A CA (its key too: the real node's tier signs the kubelet's pairs with it), the apiserver's serving pair, an
    admin client pair (system:masters) and the service-account keys."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "colocation-test-ca")])
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    import ipaddress

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]), serving_key, ca_name,
                    ca_key, ca=False, sans=[x509.DNSName("localhost"),
                                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _cert(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                             x509.NameAttribute(NameOID.COMMON_NAME, "colocation-test-admin")]),
                  admin_key, ca_name, ca_key, ca=False, client=True)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = serialization.Encoding.PEM
    for name, data in (("ca.crt", ca.public_bytes(pem)), ("ca.key", _pem_key(ca_key)),
                       ("serving.crt", serving.public_bytes(pem)),
                       ("serving.key", _pem_key(serving_key)), ("admin.crt", admin.public_bytes(pem)),
                       ("admin.key", _pem_key(admin_key)), ("sa.key", _pem_key(sa_key)),
                       ("sa.pub", sa_key.public_key().public_bytes(
                           pem, serialization.PublicFormat.SubjectPublicKeyInfo))):
        (folder / name).write_bytes(data)


def _kubeconfig(folder: Path, port: int) -> Path:
    path = folder / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: "https://127.0.0.1:{port}", certificate-authority: "{folder / 'ca.crt'}"}}
users:
- name: admin
  user: {{client-certificate: "{folder / 'admin.crt'}", client-key: "{folder / 'admin.key'}"}}
contexts:
- name: test
  context: {{cluster: test, user: admin}}
current-context: test
""")
    return path


def _wait_ready(kubeconfig: Path, procs: list[subprocess.Popen[bytes]], log: Path, deadline: float) -> None:
    kubectl = shutil.which("kubectl") or "kubectl"
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                program = os.fsdecode(p.args if isinstance(p.args, (str, bytes, os.PathLike)) else p.args[0])
                raise RuntimeError(f"{program} exited with {p.returncode}: {log.read_text()[-3000:]}")
        done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", "--raw", "/readyz"],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip() == "ok":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the apiserver was not ready in time: {log.read_text()[-3000:]}")


@contextmanager
def _started(assets: Path) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="colocation-apiserver-"))
    procs: list[subprocess.Popen[bytes]] = []
    log = folder / "apiserver.log"
    try:
        _pki(folder)
        etcd_port, peer_port, port = _free_port(), _free_port(), _free_port()
        with open(folder / "etcd.log", "wb") as etcd_log:
            procs.append(subprocess.Popen(
                [_etcd(assets) or "etcd", "--data-dir", str(folder / "etcd"),
                 "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                 "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer_port}", "--unsafe-no-fsync"],
                stdout=etcd_log, stderr=subprocess.STDOUT, start_new_session=True))
        with open(log, "wb") as apiserver_log:
            procs.append(subprocess.Popen(
                [str(assets / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                 "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
                 f"--cert-dir={folder}", f"--tls-cert-file={folder / 'serving.crt'}",
                 f"--tls-private-key-file={folder / 'serving.key'}", f"--client-ca-file={folder / 'ca.crt'}",
                 "--authorization-mode=RBAC", "--service-cluster-ip-range=10.0.0.0/24",
                 "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                 f"--service-account-key-file={folder / 'sa.pub'}",
                 f"--service-account-signing-key-file={folder / 'sa.key'}",
                 # No controller manager creates the default service accounts (envtest does the same).
                 "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true"],
                stdout=apiserver_log, stderr=subprocess.STDOUT, start_new_session=True))
        kubeconfig = _kubeconfig(folder, port)
        _wait_ready(kubeconfig, procs, log, time.monotonic() + 120)
        yield kubeconfig
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def cluster() -> Iterator[Cluster]:
    """The apiserver the environment names (started here when it names a folder of binaries)."""
    import json

    def made(kubeconfig: Path, started: bool) -> Cluster:
        probe = Cluster(kubeconfig, "", 0, started)
        info = json.loads(probe.kubectl("get", "--raw", "/version").stdout)
        minor = int("".join(ch for ch in str(info.get("minor", "0")) if ch.isdigit()) or 0)
        return Cluster(kubeconfig, str(info.get("gitVersion", "")), minor, started)

    if os.environ.get(KUBECONFIG_ENV):
        yield made(Path(os.environ[KUBECONFIG_ENV]), False)
        return
    with _started(Path(os.environ[ASSETS_ENV])) as kubeconfig:
        yield made(kubeconfig, True)


@contextmanager
def for_tests() -> Iterator[Cluster]:
    """The tier's apiserver for a test module's fixture: skipped, with the reason, when there is none or it is
    older than 1.30."""
    import pytest  # only the tests need it; `python -m harness.real_apiserver` does not

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with cluster() as c:
        if c.minor < MIN_MINOR:
            pytest.skip(f"the apiserver is {c.version}: the tier needs 1.{MIN_MINOR} or newer")
        yield c


if __name__ == "__main__":  # start one by hand: python -m harness.real_apiserver (stops on Enter or Ctrl-C)
    reason = skip_reason()
    if reason:
        raise SystemExit(reason)
    with cluster() as c:
        print(f"{c.version} ready: export KUBECONFIG={c.kubeconfig}", flush=True)
        with suppress(KeyboardInterrupt, EOFError):
            input()
