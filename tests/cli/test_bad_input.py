"""The command line never throws: every subcommand of both programs, given each kind of bad input where it reads a
file, a folder or a kubeconfig, or with its stdout closed, ends in one line that names what is wrong and an exit
code its ``--help`` lists, never a traceback. ``serve`` and ``run`` run as real processes, as a user runs them
(given input they took, they would serve); the commands that end by themselves run through the same ``main()`` in
this process, where an exception that escapes it is the traceback a process would print."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.yaml_bombs import alias_lines, bomb
from tests.serving import free_port
from webhook.cli import agent as agent_cli
from webhook.cli import webhook as webhook_cli

ROOT = Path(__file__).resolve().parents[2]
POD = str(ROOT / "examples" / "pod-koord-batch.yaml")
EXAMPLE_STATE = str(ROOT / "webhook" / "cluster" / "example")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("KUBERNETES_SERVICE_HOST", None)
PROGRAMS = {"colocation-webhook": "webhook.cli.webhook", "colocation-agent": "webhook.cli.agent"}

# The bad files: what a user gives by mistake where one YAML object is read.
BAD_FILES: dict[str, bytes | None] = {
    "missing": None,
    "empty": b"",
    "binary": bytes(range(256)),
    "Latin-1": "kind: Pod\nmetadata: {name: caf\xe9}\n".encode("latin-1"),
    "YAML list": b"- a\n- b\n",
    "two documents": b"a: 1\n---\nb: 2\n",
    "wrong kind": b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
    "alias bomb": bomb(9).encode(),  # "billion laughs": refused as kube-apiserver refuses it (issue 41)
}
# Where a folder is read: none there, a file, or a folder holding one bad file. (Another kind in a state folder
# is no error: the folder holds what one would `kubectl apply`, and the state keeps the kinds it reads.)
BAD_FOLDERS = ("missing", "a file", "binary", "Latin-1", "YAML list", "a symlink to nothing", "alias bomb")


@dataclass(frozen=True)
class Case:
    prog: str
    argv: Callable[[str], list[str]]  # the bad path in, the command line out
    inputs: tuple[str, ...]           # which bad inputs apply
    folder: bool = False              # the argument is a folder


def _port() -> str:
    return str(free_port())


# Every place a subcommand reads what a user names. serve and run must fail before serving: each case gives them
# a free port and nothing else they could start on.
W, A = "colocation-webhook", "colocation-agent"
FILES = (*BAD_FILES, "directory", "a symlink to nothing")
CASES = {
    "review FILE": Case(W, lambda p: ["review", p], FILES),
    "review --old": Case(W, lambda p: ["review", POD, "--old", p], FILES),
    "review --quota-config": Case(W, lambda p: ["review", POD, "--quota-config", p], FILES),
    "review --kubeconfig": Case(W, lambda p: ["review", POD, "--kubeconfig", p], FILES),
    "review --cluster-state": Case(W, lambda p: ["review", POD, "--cluster-state", p], BAD_FOLDERS, folder=True),
    "policies --kubeconfig": Case(W, lambda p: ["policies", "--kubeconfig", p], ("missing", "empty", "binary",
                                                                                 "directory")),
    "policies --check": Case(W, lambda p: ["policies", "--cluster-state", EXAMPLE_STATE, "--check", p],
                             ("missing", "binary", "Latin-1", "YAML list", "directory", "alias bomb")),
    "serve --tls-cert-file": Case(W, lambda p: ["serve", "--port", _port(), "--metrics-port", "0",
                                                "--tls-cert-file", p, "--tls-private-key-file", p],
                                  FILES),
    "serve --client-ca-file": Case(W, lambda p: ["serve", "--port", _port(), "--metrics-port", "0", "--cert-dir",
                                                 "certs", "--client-ca-file", p], FILES),
    "serve --quota-config": Case(W, lambda p: ["serve", "--port", _port(), "--metrics-port", "0", "--cert-dir",
                                               "certs", "--quota-config", p], FILES),
    "serve --kubeconfig": Case(W, lambda p: ["serve", "--port", _port(), "--metrics-port", "0", "--cert-dir", "certs",
                                             "--kubeconfig", p], FILES),
    "serve --cluster-state": Case(W, lambda p: ["serve", "--port", _port(), "--metrics-port", "0", "--cert-dir",
                                                "certs", "--cluster-state", p], BAD_FOLDERS, folder=True),
    "serve --cert-dir": Case(W, lambda p: ["serve", "--port", _port(), "--metrics-port", "0", "--cert-dir", p],
                             ("a file",), folder=True),
    "certs generate --out": Case(W, lambda p: ["certs", "generate", "--service", "s", "--namespace", "n",
                                               "--out", p + "/sub"], ("a file",), folder=True),
    "certs ca-bundle --out": Case(W, lambda p: ["certs", "ca-bundle", "--out", p], ("missing", "a file"),
                                  folder=True),
    "certs bootstrap --kubeconfig": Case(W, lambda p: ["certs", "bootstrap", "--namespace", "n", "--service", "s",
                                                       "--secret-name", "x", "--kubeconfig", p],
                                         FILES),
    "agent once --kubeconfig": Case(A, lambda p: ["once", "--node-name", "n", "--kubeconfig", p],
                                    FILES),
    "agent once --cluster-state": Case(A, lambda p: ["once", "--node-name", "n", "--cluster-state", p], BAD_FOLDERS,
                                       folder=True),
    "agent once --proc-root": Case(A, lambda p: ["once", "--node-name", "n", "--proc-root", p], ("missing", "a file"),
                                   folder=True),
    "agent once --cgroup-root": Case(A, lambda p: ["once", "--node-name", "n", "--cgroup-root", p],
                                     ("missing", "a file"), folder=True),
    "agent run --kubeconfig": Case(A, lambda p: ["run", "--node-name", "n", "--metrics-port", "0", "--kubeconfig",
                                                 p], FILES),
    "agent run --cluster-state": Case(A, lambda p: ["run", "--node-name", "n", "--metrics-port", "0", "--dry-run",
                                                    "--cluster-state", p], BAD_FOLDERS, folder=True),
}


def _documented_codes(prog: str) -> set[int]:
    """The exit codes the program's --help epilog lists."""
    module = webhook_cli if prog == W else agent_cli
    text = module.parser().format_help()
    return {int(code) for code in re.findall(r"^  (\d+) ", text.split("exit codes:")[1], flags=re.M)}


def _bad_input(tmp: Path, kind: str, folder: bool) -> str:
    if folder:
        if kind == "missing":
            return str(tmp / "no-such-folder")
        if kind == "a file":
            (tmp / "a-file.yaml").write_text("kind: Pod\n")
            return str(tmp / "a-file.yaml")
        d = tmp / "state"
        d.mkdir()
        if kind == "a symlink to nothing":  # in a sub-folder: every part of the folder is read
            (d / "sub").mkdir()
            (d / "sub" / "bad.yaml").symlink_to(tmp / "gone.yaml")
            return str(d)
        data = BAD_FILES[kind]
        assert data is not None
        (d / "bad.yaml").write_bytes(data)
        return str(d)
    if kind == "directory":
        (tmp / "a-folder").mkdir()
        return str(tmp / "a-folder")
    if kind == "a symlink to nothing":
        (tmp / "input.yaml").symlink_to(tmp / "gone.yaml")
        return str(tmp / "input.yaml")
    data = BAD_FILES[kind]
    if data is not None:
        (tmp / "input.yaml").write_bytes(data)
    return str(tmp / "input.yaml")


# Given input it took, `run` would go on measuring and acting: a process, with a timeout. `serve` runs here with its
# server's run() made to fail the case: a serve that took the bad input gets that far.
SERVING = ("run",)


def _would_serve(self: object, **_: object) -> None:
    raise RuntimeError("serve took the bad input and went on to serve")


def _in_process(prog: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``main(argv)`` as the process would run it: its exit code, stdout and stderr, and an escaped exception
    printed as the interpreter would."""
    module = webhook_cli if prog == W else agent_cli
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # setup_logging replaces them: pytest's are given back
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = module.main(argv)
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        root.handlers[:], root.level = handlers, level
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _run(prog: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", PROGRAMS[prog], *argv], cwd=cwd, env=ENV, capture_output=True,
                              text=True, timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:  # it took the bad input and went on (serve served): a failure
        return subprocess.CompletedProcess(exc.cmd, -1, "", f"still running after 30 s: {exc.stderr!r}")


def _judge(prog: str, argv: list[str], r: subprocess.CompletedProcess[str], where: str) -> str | None:
    """What is wrong with how the program ended, or None."""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    if "Traceback" in r.stderr:
        return f"a traceback:\n{r.stderr[-1500:]}"
    if r.returncode != 2:
        return f"exit {r.returncode}, not 2 (unusable input); stderr: {r.stderr[-500:]}"
    if r.returncode not in _documented_codes(prog):
        return f"exit {r.returncode} is not listed in --help"
    if not lines or not lines[-1].startswith(f"{prog}: "):
        return f"the last stderr line is not the program's one-line message: {lines[-1:]}"
    if argv[0] not in ("serve", "run") and len(lines) != 1:  # serve and run log before they fail
        return f"{len(lines)} lines on stderr, not one: {r.stderr}"
    if where not in lines[-1] and "--" not in lines[-1]:
        return f"the message names neither the input nor a flag: {lines[-1]}"
    return None


def test_every_subcommand_answers_bad_input_in_one_line_with_a_documented_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.server.serving import AdmissionServer

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(AdmissionServer, "run", _would_serve)
    jobs = []
    for name, case in CASES.items():
        for kind in case.inputs:
            work = tmp_path / f"{name} {kind}".replace(" ", "_").replace("/", "_")
            work.mkdir()
            path = _bad_input(work, kind, case.folder)
            jobs.append((f"{name}: {kind}", case.prog, case.argv(path), work, Path(path).name))
    processes = [j for j in jobs if j[2][0] in SERVING]
    with ThreadPoolExecutor(max_workers=2) as pool:  # run's processes, while the rest run here
        started = pool.map(lambda j: (j[0], _judge(j[1], j[2], _run(j[1], j[2], j[3]), j[4])), processes)
        results = [(j[0], _judge(j[1], j[2], _in_process(j[1], j[2], j[3]), j[4])) for j in jobs
                   if j[2][0] not in SERVING]
        results += list(started)
    failures = [f"{name}: {problem}" for name, problem in results if problem]
    assert len(jobs) >= 100 and len(processes) >= 10
    assert not failures, "\n".join(failures)


def test_the_in_process_run_sees_what_a_process_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A usage error, an argparse error and an escaped exception come out of ``_in_process`` as from a process."""
    usage = _in_process(W, ["review", POD, "--cluster-state", str(tmp_path / "nowhere")], tmp_path)
    assert (usage.returncode, usage.stderr.count("\n")) == (2, 1), usage.stderr
    parsed = _in_process(W, ["review"], tmp_path)
    assert parsed.returncode == 2 and "the following arguments are required: FILE" in parsed.stderr

    def crash(args: object) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(webhook_cli, "review", crash)
    crashed = _in_process(W, ["review", POD], tmp_path)
    assert crashed.returncode == 1 and "Traceback" in crashed.stderr and "ZeroDivisionError: a bug" in crashed.stderr
    assert (_judge(W, ["review", POD], crashed, "x") or "").startswith("a traceback")

    from webhook.server.serving import AdmissionServer

    monkeypatch.setattr(AdmissionServer, "run", _would_serve)
    served = _in_process(W, ["serve", "--host", "127.0.0.1", "--port", _port(), "--metrics-port", "0", "--cert-dir",
                             str(tmp_path / "certs")], tmp_path)
    assert "went on to serve" in served.stderr and _judge(W, ["serve"], served, "x") is not None


@pytest.mark.parametrize(("prog", "argv"), [
    (W, ["review", POD]),
    (W, ["review", POD, "-o", "json"]),
    (W, ["certs", "ca-bundle", "--out", "certs"]),
    (A, ["once", "--node-name", "n", "--cpu-sample-seconds", "0"]),
])
def test_a_closed_stdout_is_one_line_and_141(tmp_path: Path, prog: str, argv: list[str]) -> None:
    """``| head -1`` or ``| grep -q``: the reader is gone before the output is written."""
    if argv[0] == "certs":
        assert webhook_cli.main(["certs", "generate", "--service", "s", "--namespace", "n",
                                 "--out", str(tmp_path / "certs")]) == 0
    read, write = os.pipe()
    os.close(read)  # the reader went away
    try:
        r = subprocess.run([sys.executable, "-m", PROGRAMS[prog], *argv], cwd=tmp_path, env=ENV, stdout=write,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert r.returncode == 141 and 141 in _documented_codes(prog)
    assert r.stderr.strip().splitlines()[-1] == f"{prog}: stdout was closed by its reader before all was written"


def test_serve_on_a_port_in_use_says_so_before_it_says_it_serves(tmp_path: Path) -> None:
    import socket

    for flag in ("--port", "--metrics-port"):
        with socket.create_server(("127.0.0.1", 0)) as taken:
            busy = str(taken.getsockname()[1])
            ports = {"--port": _port(), "--metrics-port": _port(), flag: busy}
            r = _run(W, ["serve", "--host", "127.0.0.1", "--cert-dir", "certs", *[x for kv in ports.items()
                                                                                  for x in kv]], tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1] == \
            f"colocation-webhook: {flag} {busy}: cannot listen on 127.0.0.1: Address already in use"
        assert "serving https" not in r.stderr


def test_review_reads_stdin(tmp_path: Path) -> None:
    pod = Path(POD).read_text()
    r = subprocess.run([sys.executable, "-m", PROGRAMS[W], "review", "-", "-o", "patch"], cwd=tmp_path, env=ENV,
                       input=pod, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "kubernetes.io/batch-cpu" in r.stdout, r.stderr
    both = subprocess.run([sys.executable, "-m", PROGRAMS[W], "review", "-", "--old", "-"], cwd=tmp_path, env=ENV,
                          input=pod, capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "both be read from stdin" in both.stderr


# Every way a YAML file comes in: (program, arguments with {} for the file or folder, a folder, read from stdin).
BOMBED = {
    "review FILE": (W, ["review", "{}"], False, False),
    "review - (stdin)": (W, ["review", "-"], False, True),
    "audit -f - (stdin)": (W, ["audit", "--cluster-state", EXAMPLE_STATE, "-f", "-"], False, True),
    "audit -f DIR": (W, ["audit", "--cluster-state", EXAMPLE_STATE, "-f", "{}"], True, False),
    "review --cluster-state DIR": (W, ["review", POD, "--cluster-state", "{}"], True, False),
    "review --quota-config": (W, ["review", POD, "--quota-config", "{}"], False, False),
    "review --kubeconfig": (W, ["review", POD, "--kubeconfig", "{}"], False, False),
    "policies --check": (W, ["policies", "--cluster-state", EXAMPLE_STATE, "--check", "{}"], False, False),
    "agent once --cluster-state DIR": (A, ["once", "--node-name", "n", "--cluster-state", "{}"], True, False),
}


@pytest.mark.parametrize("case", BOMBED)
def test_an_alias_bomb_is_refused_in_one_line_naming_the_file_the_line_and_excessive_aliasing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """The 9-level "billion laughs" (387 420 489 strings once expanded) in the apiserver's words, as
    kube-apiserver refuses it (issue 41). Its time and memory are bench/yaml_bomb.py's to measure."""
    prog, argv, folder, stdin = BOMBED[case]
    text = bomb(9)
    path = tmp_path / "state" / "pod.yaml" if folder else tmp_path / "pod.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    r = _in_process(prog, [a.replace("{}", str(path.parent if folder else path)) for a in argv], tmp_path)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert (r.returncode, len(lines)) == (2, 1), r.stderr[-2000:]
    shown = "stdin" if stdin else str(path)
    found = re.search(rf"{re.escape(shown)}:(\d+): yaml: document contains excessive aliasing \(", lines[0])
    assert found and int(found.group(1)) in alias_lines(text), lines[0]


def test_review_stays_offline_inside_a_cluster(tmp_path: Path) -> None:
    """KUBERNETES_SERVICE_HOST set (a CI runner in a pod) changes nothing: the embedded example state."""
    env = {**ENV, "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    r = subprocess.run([sys.executable, "-m", PROGRAMS[W], "review", POD, "-o", "patch"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "kubernetes.io/batch-cpu" in r.stdout, r.stderr


@pytest.mark.parametrize("prog", [W, A])
def test_help_lists_each_subcommand_once_and_the_exit_codes(prog: str) -> None:
    module = webhook_cli if prog == W else agent_cli
    text = module.parser().format_help()
    for command in (("serve", "review", "certs") if prog == W else ("run", "once")):
        assert len(re.findall(rf"^\s+{command}\s", text, flags=re.M)) == 1, text
    assert {0, 2, 130, 141} <= _documented_codes(prog)
