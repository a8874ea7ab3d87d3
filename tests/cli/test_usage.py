"""What a user meets first on both command lines: --version, help on every flag, -o, one review answer."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.validating_helpers import KOORD_PROD_CONFIG
from webhook import __version__
from webhook.cli import agent as agent_cli
from webhook.cli import webhook as webhook_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_POD = ROOT / "examples" / "pod-koord-batch.yaml"
PROGRAMS: list[tuple[str, Callable[[], argparse.ArgumentParser]]] = [
    ("colocation-webhook", webhook_cli.parser), ("colocation-agent", agent_cli.parser)]


def _all_parsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


@pytest.mark.parametrize("prog,make", PROGRAMS)
def test_version(prog: str, make: Callable[[], argparse.ArgumentParser], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        make().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{prog} {__version__}"  # then the rules' build (test_compiled)


@pytest.mark.parametrize("prog,make", PROGRAMS)
def test_every_flag_has_help_and_shows_its_default(prog: str, make: Callable[[], argparse.ArgumentParser]) -> None:
    for p in _all_parsers(make()):
        text = p.format_help()
        assert "``" not in text, f"{p.prog}: reStructuredText quotes in the help"
        for action in p._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or action.dest in ("help", "version"):
                continue
            assert action.help, f"{p.prog} {action.option_strings[0]} has no help"
            if action.default not in (None, False):
                shown = f"(default: {action.default})"
                flat = "".join(text.split())  # help wraps lines, and at hyphens
                assert "".join(shown.split()) in flat, f"{p.prog} {action.option_strings[0]}: {shown} not shown"


def _review(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = webhook_cli.main(["review", *args, "-o", "review"])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def test_review_output_is_one_admission_review_with_the_patch(capsys: pytest.CaptureFixture[str]) -> None:
    code, answer, _ = _review([str(EXAMPLE_POD)], capsys)
    assert code == 0
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert set(response) >= {"uid", "allowed", "patch", "patchType", "warnings"}
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/priority", "value": 5000} in ops
    assert any("converted cpu/memory" in w for w in response["warnings"])


def test_review_output_on_a_validating_denial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: colo-demo}\n"
                   "spec:\n  priorityClassName: koord-prod\n  containers:\n  - {name: web, image: nginx}\n")
    (tmp_path / "q.yaml").write_text(KOORD_PROD_CONFIG)
    code, answer, err = _review([str(pod), "--quota-config", str(tmp_path / "q.yaml")], capsys)
    assert code == 1
    response = answer["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"] == {
        "code": 403, "reason": "Forbidden",
        "message": "insufficient quota to match these scopes: [{PriorityClass In [koord-prod]}]"}
    assert "denied by quota-presence" in err


def test_review_output_on_a_mutating_denial_keeps_its_warnings(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n"
                   "spec:\n  priorityClassName: no-such-class\n  containers:\n  - {name: web, image: nginx}\n")
    code, answer, _ = _review([str(pod)], capsys)
    assert code == 1
    assert answer["response"]["status"]["message"] == \
        'pods "web" is forbidden: no PriorityClass with name no-such-class was found'


@pytest.mark.parametrize(("output", "what"), [("yaml", "pod"), ("json", "pod"), ("patch", "patch")])
def test_review_prints_no_pod_on_a_denial(output: str, what: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A denied pod is not admitted: a pod (or a patch) on stdout would read as the one that would run."""
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: colo-demo}\n"
                   "spec:\n  priorityClassName: koord-prod\n  containers:\n  - {name: web, image: nginx}\n")
    (tmp_path / "q.yaml").write_text(KOORD_PROD_CONFIG)
    code = webhook_cli.main(["review", str(pod), "--quota-config", str(tmp_path / "q.yaml"), "-o", output])
    out = capsys.readouterr()
    assert code == 1
    assert out.out == ""
    assert out.err.splitlines()[-1] == ("denied by quota-presence: insufficient quota to match these scopes: "
                                        f"[{{PriorityClass In [koord-prod]}}] (no {what} on stdout)")


LONG_NAMESPACE = "a-namespace-name-of-sixty-three-characters-which-the-api-allows0"
UNKNOWN_NAMESPACE_WARNING = (f"namespace {LONG_NAMESPACE} is not in the webhook's cluster state; no colocation "
                             "profile applied")


def test_review_prints_warnings_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server cuts a warning to the apiserver's 120 characters; on a terminal it is read whole."""
    pod = tmp_path / "pod.yaml"
    pod.write_text(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: {LONG_NAMESPACE}}}\n"
                   "spec:\n  containers:\n  - {name: web, image: nginx}\n")
    assert len(UNKNOWN_NAMESPACE_WARNING) > 120
    for output in ("patch", "review"):
        assert webhook_cli.main(["review", str(pod), "-o", output]) == 0
        out = capsys.readouterr()
        assert f"Warning: {UNKNOWN_NAMESPACE_WARNING}\n" in out.err
        if output == "review":
            assert json.loads(out.out)["response"]["warnings"] == [UNKNOWN_NAMESPACE_WARNING]


def test_the_server_still_cuts_a_warning_to_120_characters() -> None:
    from webhook.admission.context import Settings
    from webhook.admission.review import pod_review
    from webhook.cli.state import cluster_state
    from webhook.server.service import ReviewService, dry_run

    state, _ = cluster_state(None)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": LONG_NAMESPACE},
           "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
    warnings = dry_run(ReviewService(state, Settings()), pod_review(pod, "CREATE", None)).outcome.warnings
    assert warnings == [UNKNOWN_NAMESPACE_WARNING[:118] + "…"]


def test_agent_once_short_output_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = agent_cli.main(["once", "--node-name", "n1", "-o", "text", "--cpu-sample-seconds", "0"])
    assert code == 0
    assert capsys.readouterr().out.startswith("node n1\n")


def test_certs_generate_refusing_to_overwrite_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["certs", "generate", "--namespace", "ns", "--out", str(tmp_path)]
    assert webhook_cli.main([*base, "--service", "a"]) == 0
    assert webhook_cli.main([*base, "--service", "b"]) == 2
    assert "colocation-webhook: " in capsys.readouterr().err


BOOTSTRAP = ["certs", "bootstrap", "--namespace", "colocation-system", "--service", "colocation-webhook",
             "--secret-name", "colocation-webhook-tls"]


@pytest.mark.parametrize(("argv", "error"), [
    (["serve", "--port", "70000"], "argument --port: must be 1..65535, got 70000"),
    (["serve", "--port", "0"], "argument --port: must be 1..65535, got 0"),
    (["serve", "--port", "https"], "argument --port: invalid port 'https'"),
    (["certs", "generate", "--service", "é", "--namespace", "n"],
     'argument --service: Invalid value: "é": a DNS-1035 label must consist of lower case alphanumeric'),
    (["certs", "generate", "--service", "s", "--namespace", ""],
     'argument --namespace: Invalid value: "": a lowercase RFC 1123 label'),
    ([*BOOTSTRAP, "--mutating-webhook-configuration", "Bad_Name"],
     'argument --mutating-webhook-configuration: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'),
])
def test_flags_the_api_or_the_socket_could_not_take_are_usage_errors(argv: list[str], error: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        webhook_cli.main(argv)
    assert done.value.code == 2
    assert error in capsys.readouterr().err


def test_days_past_what_a_certificate_can_hold_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = webhook_cli.main(["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path),
                             "--days", "99999999"])
    assert code == 2 and "--days must be at most 36500, got 99999999" in capsys.readouterr().err


def _commands(p: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(``certs generate``, its parser) for every command a user runs (the leaves of the subcommand tree)."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix.strip(), p
    for action in subs:
        for name, sub in action.choices.items():
            yield from _commands(sub, f"{prefix} {name}")


def _listed(text: str) -> dict[int, str]:
    return {int(code): what for code, what in re.findall(r"^  (\d+) +(.+)$", text.split("exit codes:\n")[1],
                                                        flags=re.M)}


@pytest.mark.parametrize(("module", "names"), [
    (webhook_cli, {"serve", "review", "audit", "policies", "certs generate", "certs ca-bundle", "certs bootstrap"}),
    (agent_cli, {"run", "once"})])
def test_each_commands_help_lists_only_its_own_exit_codes(module: Any, names: set[str]) -> None:
    """`certs generate --help` says nothing of review's admitted pod: each command lists its codes, in its words."""
    commands = dict(_commands(module.parser()))
    assert set(commands) == set(module.COMMAND_CODES) == names
    every = {word for name in names for word in name.split()}
    for name, p in commands.items():
        listed = _listed(p.format_help())
        assert listed == module.COMMAND_CODES[name], name
        others = every - set(name.split())
        assert not [w for w in others if re.search(rf"\b{w}:", " ".join(listed.values()))], (name, listed)
    program = _listed(module.parser().format_help())
    assert set(program) == {code for codes in module.COMMAND_CODES.values() for code in codes}


def _doc_table(path: Path, heading: str) -> dict[int, str]:
    text = path.read_text()
    table = text[text.index(heading):].split("\n\n")[1]
    return {int(m[0]): m[1] for m in re.findall(r"^\| (\d+) \| (.+) \|$", table, flags=re.M)}


@pytest.mark.parametrize(("module", "doc", "heading"), [
    (webhook_cli, ROOT / "README.md", "Exit codes of `colocation-webhook`"),
    (agent_cli, ROOT / "docs" / "agent.md", "Exit codes (also in `colocation-agent --help`)")])
def test_the_docs_exit_code_table_lists_every_commands_codes(module: Any, doc: Path, heading: str) -> None:
    """The table names every code a command ends in, and where a code means something of its own per command (1),
    every command that ends in it."""
    table = _doc_table(doc, heading)
    codes = module.COMMAND_CODES
    assert set(table) == {code for c in codes.values() for code in c}
    for code, row in table.items():
        if code in (0, 2, 130, 141):  # done, and what run_main and the parser answer for every command
            continue
        missing = [name for name, c in codes.items() if code in c and f"`{name}" not in row]
        assert missing == [], f"{doc.name}: exit code {code} does not name {missing}"


HEAVY = {"kubernetes", "fastapi", "starlette", "uvicorn", "prometheus_client", "cryptography"}


@pytest.mark.parametrize("argv", [["review", "--help"], ["review", "/no/such/pod.yaml"], ["policies", "--help"],
                                  ["certs", "generate", "--help"], ["audit", "--help"]])
def test_a_command_that_fails_on_its_input_starts_without_the_client_or_the_edge(argv: list[str]) -> None:
    """What a command needs is imported where it runs: --help and bad input need neither the Kubernetes client
    (slow to import: docs/benchmarks.md) nor the HTTP edge. Module names, not a timing: the time is bench's to measure."""
    import subprocess
    import sys

    script = ("import contextlib, io, sys\nfrom webhook.cli.webhook import main\n"
              "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
              "    try:\n        main(sys.argv[1:])\n    except SystemExit:\n        pass\n"
              f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r})))")
    run = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.stdout.strip() == "[]", run.stdout + run.stderr
