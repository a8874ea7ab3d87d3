"""`colocation-webhook serve` as a user runs it: a real process, generated certificates, curl-like checks."""

from __future__ import annotations

import json
import os
import re
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
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
ENV.pop("KUBERNETES_SERVICE_HOST", None)


def _wait_healthy(url: str, ca: Path, proc: subprocess.Popen[str], timeout: float = 20) -> None:
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
    proc = subprocess.Popen([*CLI, "serve", "--drain-delay", "0", "--host", "127.0.0.1", "--port", str(port), "--metrics-port",
                             str(free_port())], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ca = tmp_path / "certs" / "ca.crt"
        url = f"https://localhost:{port}"
        _wait_healthy(url, ca, proc)
        verify = ssl.create_default_context(cafile=str(ca))
        assert httpx.get(url + "/readyz", verify=verify).status_code == 200
        review = load_fixture("admission/v1-mutate-create-plain.json")
        r = httpx.post(url + "/mutate?timeout=10s", content=json.dumps(review), verify=verify)
        assert r.json()["response"]["uid"] == review["request"]["uid"]
        assert (tmp_path / "certs" / "localhost.key").stat().st_mode & 0o777 == 0o600
        assert not (tmp_path / "certs" / "tls.key").exists()  # tls.* are certs generate's, never serve's
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err[-500:]
    assert "self-signed certificate for localhost" in err
    assert str(tmp_path / "certs" / "ca.crt") in err
    assert "Traceback" not in err


def test_serve_stops_with_exit_2_on_a_broken_state_file(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "bad.yaml").write_text("kind: PriorityClass\nmetadata: {name: x\nvalue: 1\n")
    r = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--metrics-port", "0", "--cluster-state",
                        str(tmp_path / "state")],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "bad.yaml:" in r.stderr and "invalid YAML" in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_rejects_half_a_tls_pair(tmp_path: Path) -> None:
    r = subprocess.run([*CLI, "serve", "--tls-cert-file", "x.crt"], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--tls-cert-file and --tls-private-key-file go together" in r.stderr


RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_serve_logs_json_lines_with_utc_times_and_each_denial_once(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen([*CLI, "serve", "--drain-delay", "0", "--host", "127.0.0.1", "--port", str(port), "--metrics-port",
                             str(metrics_port), "--log-format", "json", "--log-level", "info"], cwd=tmp_path,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    review = load_fixture("admission/v1-validate-create-plain.json")  # made to mix batch and native cpu
    container = review["request"]["object"]["spec"]["containers"][0]
    container.setdefault("resources", {}).setdefault("requests", {}).update(
        {"cpu": "1", "kubernetes.io/batch-cpu": "1000"})
    try:
        ca = tmp_path / "certs" / "ca.crt"
        _wait_healthy(f"https://localhost:{port}", ca, proc)
        r = httpx.post(f"https://localhost:{port}/validate", content=json.dumps(review),
                       verify=ssl.create_default_context(cafile=str(ca)))
        assert r.json()["response"]["allowed"] is False
        assert "colocation_webhook_build_info" in httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    lines = [json.loads(line) for line in err.splitlines()]  # every line is one JSON object
    assert lines and all(RFC3339_UTC.match(line["time"]) for line in lines)
    assert "\x1b" not in err and not any("color_message" in line for line in lines)
    assert any(line["name"].startswith("uvicorn") for line in lines)  # uvicorn's own lines, uncoloured
    denials = [line for line in lines if line["message"].startswith("denied ")]
    assert len(denials) == 1
    request = review["request"]
    assert denials[0]["level"] == "INFO"
    assert {k: denials[0][k] for k in ("uid", "namespace", "pod")} == {
        "uid": request["uid"], "namespace": request["namespace"], "pod": request["name"]}
    assert denials[0]["rule"] == "batch-mixing" and "batch-mixing" in denials[0]["message"]
    assert "asks for both kubernetes.io/batch-cpu and cpu" in denials[0]["message"]


def test_serve_log_level_warning_drops_info_lines(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--drain-delay", "0", "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
                             "--log-level", "warning"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(f"https://localhost:{port}", tmp_path / "certs" / "ca.crt", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert " INFO " not in err and "serving https" not in err


def test_serve_refuses_a_client_ca_that_is_no_ca_and_a_shared_metrics_port(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    r = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--metrics-port", "0", "--client-ca-file",
                        str(tmp_path / "ca.pem")], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--client-ca-file:" in r.stderr and "no PEM certificate" in r.stderr and "Traceback" not in r.stderr
    port = str(free_port())
    r = subprocess.run([*CLI, "serve", "--port", port, "--metrics-port", port], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "is the admission port" in r.stderr


def test_serve_names_what_is_wrong_with_the_tls_pair(tmp_path: Path) -> None:
    (tmp_path / "garbage.crt").write_text("not a certificate\n")
    (tmp_path / "garbage.key").write_text("not a key\n")
    (tmp_path / "folder").mkdir()
    for cert, key, error in [
        ("garbage.crt", "garbage.key", "--tls-cert-file/--tls-private-key-file: "),  # then check_pair's words
        ("folder", "garbage.key", f"--tls-cert-file: {tmp_path / 'folder'} is not a file"),
    ]:
        r = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--metrics-port", "0", "--tls-cert-file",
                            str(tmp_path / cert), "--tls-private-key-file", str(tmp_path / key)],
                           cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, r.stderr
        assert error in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert cert == "folder" or "the certificate does not parse" in r.stderr, r.stderr
