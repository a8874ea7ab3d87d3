"""`colocation-webhook serve` as a user runs it: a real process, generated certificates, curl-like checks."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import load_fixture
from tests.serving import free_port

CLI = [sys.executable, "-m", "webhook.cli.webhook"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
ENV.pop("KUBERNETES_SERVICE_HOST", None)


def _wait_healthy(url: str, ca: Path, proc: subprocess.Popen, timeout: float = 20) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early: {proc.stderr.read() if proc.stderr else ''}")
        if ca.exists():
            try:
                if httpx.get(url + "/healthz", verify=ssl.create_default_context(cafile=str(ca)), timeout=1).text == "ok":
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise AssertionError("serve did not become healthy")


def test_serve_with_no_flags_runs_on_the_embedded_state(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ca = tmp_path / "certs" / "ca.crt"
        url = f"https://localhost:{port}"
        _wait_healthy(url, ca, proc)
        verify = ssl.create_default_context(cafile=str(ca))
        assert httpx.get(url + "/readyz", verify=verify).status_code == 200
        review = load_fixture("admission/v1-mutate-create-plain.json")
        r = httpx.post(url + "/mutate?timeout=10s", content=json.dumps(review), verify=verify)
        assert r.json()["response"]["uid"] == review["request"]["uid"]
        assert (tmp_path / "certs" / "tls.key").stat().st_mode & 0o777 == 0o600
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err[-500:]
    assert "self-signed certificate for localhost" in err
    assert str(tmp_path / "certs" / "ca.crt") in err
    assert "Traceback" not in err


def test_serve_reuses_valid_certificates(tmp_path: Path) -> None:
    from webhook.tls.certs import ensure_localhost

    paths, created = ensure_localhost(tmp_path / "certs")
    assert created
    before = paths.cert.read_bytes()
    _, created_again = ensure_localhost(tmp_path / "certs")
    assert not created_again and paths.cert.read_bytes() == before
    paths.key.write_text("garbage")
    _, recreated = ensure_localhost(tmp_path / "certs")
    assert recreated and paths.cert.read_bytes() != before


def test_serve_stops_with_exit_2_on_a_broken_state_file(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "bad.yaml").write_text("kind: PriorityClass\nmetadata: {name: x\nvalue: 1\n")
    r = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--cluster-state", str(tmp_path / "state")],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "bad.yaml:" in r.stderr and "invalid YAML" in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_rejects_half_a_tls_pair(tmp_path: Path) -> None:
    r = subprocess.run([*CLI, "serve", "--tls-cert-file", "x.crt"], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--tls-cert-file and --tls-private-key-file go together" in r.stderr
