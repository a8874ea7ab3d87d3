"""``serve``'s own certificate pair never costs a file it did not write: a CA already in a caBundle stays, and
signs serve's pair instead; what serve cannot use it names, with the flag to use."""

from __future__ import annotations

import contextlib
import hashlib
import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from tests.serving import free_port
from webhook.cli.webhook import main
from webhook.tls.certs import LOCALHOST, CertPaths, CertsError, ensure_localhost, generate, san_names

CLI = [sys.executable, "-m", "webhook.cli.webhook"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
ENV.pop("KUBERNETES_SERVICE_HOST", None)


def _generate(out: Path, *extra: str) -> int:
    return main(["certs", "generate", "--service", "colocation-webhook", "--namespace", "colocation-system",
                 "--out", str(out), *extra])


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _issued_by(cert: Path, ca: Path) -> None:
    x509.load_pem_x509_certificate(cert.read_bytes()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(ca.read_bytes()))


def test_serve_after_certs_generate_keeps_the_ca_and_signs_its_pair_with_it(tmp_path: Path) -> None:
    """The issue's steps: certs generate for the Service, then serve with its default folder, over real TLS."""
    assert _generate(tmp_path / "certs") == 0
    before = _digests(tmp_path / "certs")
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--drain-delay", "0", "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0"],
                            cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True)
    try:
        verify = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
        for _ in range(200):
            try:
                assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=verify, timeout=1).text == "ok"
                break
            except (httpx.TransportError, FileNotFoundError):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    assert proc.wait(0.1) is None, "serve exited"
        else:
            raise AssertionError("serve did not answer")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    after = _digests(tmp_path / "certs")
    assert {n: after[n] for n in before} == before  # ca.crt, ca.key, tls.crt, tls.key: not one byte changed
    paths = CertPaths(tmp_path / "certs", "localhost")
    _issued_by(paths.cert, paths.ca_cert)
    assert "signed by the CA already there" in err


def test_reused_while_valid_and_the_host_is_covered(tmp_path: Path) -> None:
    paths, what = ensure_localhost(tmp_path)
    assert what.startswith("created") and "with a new CA" in what
    assert set(san_names(paths.cert)) == set(LOCALHOST)
    before = _digests(tmp_path)
    assert ensure_localhost(tmp_path)[1].startswith("reusing")
    assert _digests(tmp_path) == before
    # Serving a named address: serve's own leaf is renewed for it, its own CA kept.
    paths, what = ensure_localhost(tmp_path, "127.0.0.2")
    assert "127.0.0.2" in san_names(paths.cert) and "signed by the CA already there" in what
    after = _digests(tmp_path)
    assert after["ca.crt"] == before["ca.crt"] and after["localhost.key"] != before["localhost.key"]


def test_a_ca_without_its_key_is_refused_unless_serve_made_it(tmp_path: Path) -> None:
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    generate(theirs, ["colocation-webhook.colocation-system.svc"])
    (theirs / "ca.key").unlink()
    before = _digests(theirs)
    with pytest.raises(CertsError, match=r"ca\.key is missing beside .*ca\.crt.*serve replaces only a CA it made "
                                         r"itself.*--tls-cert-file.*--cert-dir"):
        ensure_localhost(theirs)
    assert _digests(theirs) == before
    # serve's own CA, its key gone (and the leaf, or the leaf would still serve): serve made it, so it may make anew.
    ensure_localhost(mine)
    (mine / "ca.key").unlink()
    (mine / "localhost.key").unlink()
    old_ca = (mine / "ca.crt").read_bytes()
    paths, what = ensure_localhost(mine)
    assert "with a new CA" in what and paths.ca_cert.read_bytes() != old_ca
    _issued_by(paths.cert, paths.ca_cert)


def test_a_changed_key_is_no_longer_serves_to_replace(tmp_path: Path) -> None:
    paths, _ = ensure_localhost(tmp_path)
    paths.key.write_text("a key someone put here\n")
    before = _digests(tmp_path)
    with pytest.raises(CertsError, match=r"localhost\.key was not made by serve.*will not replace it"):
        ensure_localhost(tmp_path)
    assert _digests(tmp_path) == before


def test_an_expiring_ca_from_elsewhere_is_refused(tmp_path: Path) -> None:
    generate(tmp_path, ["colocation-webhook.colocation-system.svc"], days=10)
    before = _digests(tmp_path)
    with pytest.raises(CertsError, match=r"ca\.crt expires on .*within 30 days"):
        ensure_localhost(tmp_path)
    assert _digests(tmp_path) == before


def test_serve_says_in_one_line_what_is_there_and_exits_2(tmp_path: Path) -> None:
    assert _generate(tmp_path / "certs") == 0
    (tmp_path / "certs" / "ca.key").unlink()
    r = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--metrics-port", "0"], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("colocation-webhook: --cert-dir certs: "), r.stderr
    assert "ca.key is missing" in lines[0] and "--tls-cert-file" in lines[0]
    assert not (tmp_path / "certs" / "localhost.crt").exists()


def test_cert_dir_goes_only_without_tls_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--cert-dir", str(tmp_path), "--tls-cert-file", "a", "--tls-private-key-file", "b"]) == 2
    assert "--cert-dir" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["no key", "expiring"])
def test_certs_generate_replaces_a_ca_only_with_new_ca(tmp_path: Path, damage: str) -> None:
    if damage == "expiring":
        generate(tmp_path, ["x"], days=10)
    else:
        assert _generate(tmp_path) == 0
        (tmp_path / "ca.key").unlink()
    ca = (tmp_path / "ca.crt").read_bytes()
    assert _generate(tmp_path, "--force") == 2
    assert (tmp_path / "ca.crt").read_bytes() == ca
    assert _generate(tmp_path, "--force", "--new-ca") == 0
    assert (tmp_path / "ca.crt").read_bytes() != ca
    _issued_by(tmp_path / "tls.crt", tmp_path / "ca.crt")


def test_certs_generate_keeps_an_expired_pair_for_other_names_without_force(tmp_path: Path) -> None:
    """Someone's pair for another Service, out of date: still not generate's to replace unprompted."""
    from tests.tls.test_certs import _self_signed

    cert, key = _self_signed(-3, -1)     # expired, and its only name is "t"
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    assert _generate(tmp_path) == 2
    assert (tmp_path / "tls.key").read_bytes() == key
    assert _generate(tmp_path, "--force") == 0
    assert (tmp_path / "tls.key").read_bytes() != key


def test_serve_with_a_given_pair_does_not_load_cryptography(tmp_path: Path) -> None:
    """The Deployment's shape (--tls-cert-file from a Secret): the pair is checked by OpenSSL alone, so the memory
    cryptography takes stays out of the process (bench/state_memory.py; docs/benchmarks.md); it is loaded only to
    make or explain a pair."""
    paths = generate(tmp_path, ["localhost", "127.0.0.1"])
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--drain-delay", "0", "--host", "127.0.0.1", "--port", str(port),
                             "--metrics-port", "0", "--tls-cert-file", str(paths.cert),
                             "--tls-private-key-file", str(paths.key)],
                            cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True)
    try:
        verify = ssl.create_default_context(cafile=str(paths.ca_cert))
        for _ in range(200):
            try:
                assert httpx.get(f"https://127.0.0.1:{port}/readyz", verify=verify, timeout=1).text == "ok"
                break
            except httpx.TransportError:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    assert proc.wait(0.1) is None, "serve exited"
        else:
            raise AssertionError("serve did not answer")
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "/cryptography/" not in maps
    assert "_ssl" in maps or "libssl" in maps  # the maps are read whole: OpenSSL is there
