"""The small ways the command line said too little or the wrong thing (issue 34): Ctrl-C ends in one line and 130;
flags that contradict each other are exit 2; ``serve --host`` is checked before a certificate is made for it; an
IPv6 address is written in brackets in a URL; ``review`` of a large JSON file that is no Pod says so at once; a
kubeconfig that skips certificate checks is one warning line, not one per request; the ``FILE`` placeholder never
shows in a message; certs/README.md names the files ``serve`` writes."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import orjson
import pytest
import yaml

from harness.apiserver import ReplayAPIServer
from tests.cluster.test_live import serve_webhook_kinds
from tests.serving import free_port
from webhook.cli.webhook import main

ROOT = Path(__file__).resolve().parents[2]
POD = ROOT / "examples" / "pod-koord-batch.yaml"
CLI = [sys.executable, "-m", "webhook.cli.webhook"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("KUBERNETES_SERVICE_HOST", None)


def _reading_stdin(pid: int, timeout: float = 30.0) -> None:
    """Wait until the process blocks in read(0, ...) (x86-64 and arm64 Linux: /proc/PID/syscall)."""
    numbers = {"x86_64": "0", "aarch64": "63"}
    import platform

    number = numbers.get(platform.machine())
    if number is None or not Path(f"/proc/{pid}/syscall").exists():
        pytest.skip("cannot tell when the process reads stdin on this machine")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            fields = []
        if fields[:2] == [number, "0x0"]:
            return
        time.sleep(0.05)
    raise AssertionError("the process never read stdin")


@pytest.mark.parametrize("argv", [["review", "-"], ["audit", "-f", "-"]])
def test_ctrl_c_prints_one_line_and_exits_130(argv: list[str]) -> None:
    proc = subprocess.Popen([*CLI, *argv], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _reading_stdin(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    lines = [line for line in err.splitlines() if not line.startswith("audit: cluster state:")]
    assert (proc.returncode, out, lines) == (
        130, "", ["colocation-webhook: interrupted (Ctrl-C) before the work was done"])


@pytest.mark.parametrize(("argv", "said"), [
    (["review", str(POD), "--old", str(POD), "--operation", "CREATE"],
     "--old is the pod before an UPDATE, and a CREATE has none: give --operation UPDATE, or no --old"),
    (["certs", "generate", "--service", "s", "--namespace", "n", "--new-ca", "--out", "{tmp}/certs"],
     "--new-ca replaces the CA, and so the caBundle of every webhook configuration: it goes with --force"),
])
def test_conflicting_flags_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                  said: str) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert capsys.readouterr().err == f"colocation-webhook: {said}\n"
    assert not (tmp_path / "certs").exists()


@pytest.mark.parametrize(("host", "why"), [("203.0.113.7", "Cannot assign requested address"),
                                           ("no-such-host.invalid", None)])
def test_serve_host_is_checked_before_a_certificate_is_made(tmp_path: Path, host: str, why: str | None) -> None:
    r = subprocess.run([*CLI, "serve", "--host", host, "--port", str(free_port()), "--metrics-port", "0"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"colocation-webhook: --host {host}: cannot listen on it: {why or ''}"), r.stderr
    assert len(r.stderr.splitlines()) == 1 and "while attempting" not in r.stderr
    assert not (tmp_path / "certs").exists()


def test_an_ipv6_host_is_written_in_brackets(tmp_path: Path) -> None:
    try:
        import socket

        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port, metrics = free_port(), free_port()
    proc = subprocess.Popen([*CLI, "serve", "--host", "::1", "--port", str(port), "--metrics-port", str(metrics),
                             "--drain-delay", "0"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline, seen = time.monotonic() + 30, ""
        assert proc.stderr is not None
        while time.monotonic() < deadline and "metrics on" not in seen:
            seen += proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=15)
    text = seen + rest
    assert f"serving https://[::1]:{port} (" in text, text
    assert f"metrics on http://[::1]:{metrics}/metrics" in text, text
    assert "https://::1:" not in text and "http://::1:" not in text


def _big_list(path: Path, megabytes: int) -> None:
    pod = yaml.safe_load(POD.read_text())
    pod["metadata"]["annotations"] = {"note": "x" * 2000}
    items = [dict(pod, metadata={**pod["metadata"], "name": f"p-{i}"}) for i in range(megabytes * 1024 * 1024 // 2600)]
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}, option=orjson.OPT_INDENT_2))


def test_review_of_a_large_json_list_says_it_is_no_pod_at_once(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A large List read whole (PyYAML on JSON) took minutes and gigabytes before saying it is not a Pod
    (docs/benchmarks.md, "Figures behind the code's comments"): now it is streamed and answered at once."""
    path = tmp_path / "pods.json"
    _big_list(path, 8)
    tracemalloc.start()
    started = time.monotonic()
    try:
        code = main(["review", str(path)])
        took = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (code, capsys.readouterr().err) == (
        2, f"colocation-webhook: {path}: is a List; review takes a Pod or AdmissionReview: audit -f {path} checks "
           "each pod and workload of a List\n")
    assert took < 3.0, f"{took:.1f} s"
    assert peak < 2 * path.stat().st_size, f"{peak / 2**20:.0f} MiB for a {path.stat().st_size / 2**20:.0f} MiB file"


@pytest.mark.parametrize("text", [
    orjson.dumps(yaml.safe_load(POD.read_text())).decode(),              # JSON: the fast decoders
    "{apiVersion: v1, kind: Pod, metadata: {name: flow, namespace: colo-demo}, spec: {containers: [{name: c, "
    "image: nginx}]}}",                                                    # YAML's flow style: read as YAML
])
def test_review_reads_json_and_flow_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    path = tmp_path / "pod.json"
    path.write_text(text)
    assert main(["review", str(path), "-o", "json"]) == 0, capsys.readouterr().err
    assert orjson.loads(capsys.readouterr().out)["kind"] == "Pod"


def test_review_old_of_another_kind_is_said_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "old.json"
    _big_list(path, 1)
    assert main(["review", str(POD), "--old", str(path)]) == 2
    assert capsys.readouterr().err == (f"colocation-webhook: --old {path}: expected the Pod before the update, got "
                                       "kind 'List'\n")


@pytest.mark.parametrize(("content", "args"), [
    ("", []), ("null\n", []), ("- a\n", []), ("a: 1\n---\nb: 2\n", []), ("kind: Service\n", []),
    ("{", []), (None, []), ("", ["--old", "{path}"]),
])
def test_no_message_names_the_placeholder_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               content: str | None, args: list[str]) -> None:
    path = tmp_path / "input.yaml"
    if content is not None:
        path.write_text(content)
    argv = ["review", str(path) if not args else str(POD), *[a.replace("{path}", str(path)) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(path) in err and not re.search(r"\bFILE\b", err), err


def _https(api: ReplayAPIServer, folder: Path) -> str:
    """The replayed apiserver behind TLS, with a certificate no client here trusts."""
    from webhook.tls.certs import generate

    generate(folder, ["127.0.0.1"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    httpd = api._httpd
    assert httpd is not None
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    return f"https://127.0.0.1:{httpd.server_address[1]}"


def test_an_insecure_kubeconfig_is_one_warning_line(tmp_path: Path) -> None:
    with ReplayAPIServer(speed=20) as api:
        serve_webhook_kinds(api)
        page = {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}
        api.add_json("GET", "/api/v1/pods", page, watch=False)
        url = _https(api, tmp_path / "tls")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
        r = subprocess.run([*CLI, "audit", "--kubeconfig", str(kubeconfig), "--kinds", "po"], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=60)
        lists = len(api.received)
    assert lists > 6  # every kind of the state and the pods: a warning each, before
    assert r.returncode == 3, r.stderr  # no pods: nothing to audit
    assert r.stderr.splitlines() == [
        f"colocation-webhook: warning: --kubeconfig {kubeconfig}: insecure-skip-tls-verify is set: the API "
        "server's certificate is not checked, and whoever answers at its address is taken for it",
        "audit: nothing to audit: the cluster holds no pods"], r.stderr


def test_certs_readme_names_the_files_serve_writes(tmp_path: Path) -> None:
    from webhook.tls.certs import ensure_localhost

    ensure_localhost(tmp_path / "certs", "127.0.0.1")
    written = sorted(p.name for p in (tmp_path / "certs").iterdir())
    readme = (ROOT / "certs" / "README.md").read_text()
    bullet = readme[readme.index("- `colocation-webhook serve` with no TLS flags"):].split("\n- ")[0]
    named = set(re.findall(r"`([.\w-]+\.(?:crt|key)|\.made-by-serve)`", bullet))
    assert set(written) <= named, f"serve wrote {written}; the README names {sorted(named)}"
    assert "`tls.crt` and `tls.key` are never\n  serve's" in bullet or "are never serve's" in bullet.replace("\n  ", " ")
