"""A cluster the commands cannot reach is one line, at once (issue 41): the API server and its error, not a line
per kind and a wait for --sync-timeout. And a command that needs a cluster finds the kubeconfig as kubectl does
($KUBECONFIG, then ~/.kube/config) when given no cluster flag, and says which; a command that works without a
cluster (review, once, serve) does not pick one up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POD = str(ROOT / "examples" / "pod-koord-batch.yaml")
PROGRAMS = {"colocation-webhook": "webhook.cli.webhook", "colocation-agent": "webhook.cli.agent"}
SERVER = "https://127.0.0.1:1"   # nothing listens on port 1
REFUSED = f"cannot reach the API server at {SERVER}: [Errno 111] Connection refused"


def kubeconfig(path: Path, server: str = SERVER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def run(program: str, *args: str, home: Path, kubeconfig_env: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("KUBECONFIG", None)
    if kubeconfig_env is not None:
        env["KUBECONFIG"] = kubeconfig_env
    return subprocess.run([sys.executable, "-m", PROGRAMS[program], *args], env=env, cwd=home, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv", [
    ["colocation-webhook", "review", POD, "--kubeconfig", "{k}"],
    ["colocation-webhook", "audit", "--kubeconfig", "{k}"],
    ["colocation-webhook", "policies", "--kubeconfig", "{k}"],
    ["colocation-agent", "once", "--node-name", "n", "--kubeconfig", "{k}", "--cpu-sample-seconds", "0"],
], ids=["review", "audit", "policies", "once"])
def test_an_unreachable_api_server_is_one_line_at_once(tmp_path: Path, argv: list[str]) -> None:
    k = kubeconfig(tmp_path / "k.yaml")
    started = time.monotonic()
    r = run(argv[0], *[a.replace("{k}", str(k)) for a in argv[1:]], home=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"{argv[0]}: --kubeconfig {k}: {REFUSED}\n")
    assert time.monotonic() - started < 15   # not the 30 s of --sync-timeout


@pytest.mark.parametrize("argv", [
    ["colocation-webhook", "audit"],
    ["colocation-webhook", "policies", "--check", "-"],
    ["colocation-agent", "run", "--node-name", "n", "--dry-run", "--metrics-port", "0", "--sync-timeout", "0.5"],
], ids=["audit", "policies --check", "agent run"])
@pytest.mark.parametrize("where", ["KUBECONFIG", "home"])
def test_a_command_that_needs_a_cluster_finds_the_kubeconfig_as_kubectl_does(tmp_path: Path, argv: list[str],
                                                                               where: str) -> None:
    k = kubeconfig(tmp_path / ".kube" / "config") if where == "home" else kubeconfig(tmp_path / "k.yaml")
    r = run(argv[0], *argv[1:], home=tmp_path, kubeconfig_env=str(k) if where == "KUBECONFIG" else None)
    lines = [line for line in r.stderr.splitlines() if "insecure" not in line]
    source = "the first file of $KUBECONFIG that exists" if where == "KUBECONFIG" else "~/.kube/config, with no $KUBECONFIG"
    said = [line for line in lines if "kubeconfig" in line and "using" in line]
    assert len(said) == 1, lines   # the agent logs it, with a time stamp before
    assert said[0].endswith(f"{argv[0]}: no cluster flag: using the kubeconfig {k} as kubectl would ({source})"), lines
    assert r.returncode == 2 and REFUSED in r.stderr, r.stderr


def test_of_several_kubeconfigs_the_first_that_exists_is_taken_and_said(tmp_path: Path) -> None:
    first, second = kubeconfig(tmp_path / "a.yaml"), kubeconfig(tmp_path / "b.yaml", "https://127.0.0.1:2")
    listed = os.pathsep.join([str(tmp_path / "gone.yaml"), str(first), str(second)])
    r = run("colocation-webhook", "audit", home=tmp_path, kubeconfig_env=listed)
    assert r.stderr.splitlines()[0] == (
        f"colocation-webhook: no cluster flag: using the kubeconfig {first} as kubectl would (the first file of "
        "$KUBECONFIG that exists; kubectl merges the 3 files it names, this reads that one alone)")
    assert r.stderr.splitlines()[-1] == f"colocation-webhook: --kubeconfig {first}: {REFUSED}"


@pytest.mark.parametrize("env", ["{tmp}/gone.yaml", None])
def test_with_no_kubeconfig_to_find_the_error_says_where_it_looked(tmp_path: Path, env: str | None) -> None:
    r = run("colocation-webhook", "audit", home=tmp_path,
            kubeconfig_env=None if env is None else env.format(tmp=tmp_path))
    looked = (f"$KUBECONFIG names no file that exists: {tmp_path}/gone.yaml" if env
              else f"no $KUBECONFIG, and no {tmp_path}/.kube/config")
    assert (r.returncode, r.stderr) == (2, "colocation-webhook: name what to audit: -f FILE|DIR (kubectl get ... -o "
                                           "json|yaml output, manifests), or a cluster with --kubeconfig F or "
                                           f"--in-cluster ({looked})\n")


@pytest.mark.parametrize("argv", [
    ["colocation-webhook", "review", POD, "-o", "patch"],
    ["colocation-webhook", "policies"],
    ["colocation-agent", "once", "--node-name", "n", "--cpu-sample-seconds", "0"],
], ids=["review", "policies", "once"])
def test_a_command_that_works_without_a_cluster_does_not_pick_one_up(tmp_path: Path, argv: list[str]) -> None:
    k = kubeconfig(tmp_path / ".kube" / "config")
    r = run(argv[0], *argv[1:], home=tmp_path, kubeconfig_env=str(k))
    assert r.returncode == 0, r.stderr
    assert "kubeconfig" not in r.stderr and "cannot reach" not in r.stderr
