"""A --cluster-state that cannot be read is an error naming it, for every command that reads one, never an empty
state: a folder, a sub-folder or a file without permission, a parent that cannot be entered, a symlink to nothing,
a file where a folder should be. A reload that meets one keeps the last good state and says so.

The tests run as root here, which reads everything: the commands run in a child process that drops to nobody
(``setpriv``), where the permissions hold."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serving import free_port
from webhook.cluster.files import StateFileError, load_folder

ROOT = Path(__file__).resolve().parents[2]
POD = str(ROOT / "examples" / "pod-koord-batch.yaml")
EXAMPLE = ROOT / "webhook" / "cluster" / "example"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("KUBERNETES_SERVICE_HOST", None)
NOBODY = 65534


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run as a user the permissions apply to."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, which reads any file, and no setpriv (util-linux) to drop to another user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


@pytest.fixture()
def base() -> Iterator[Path]:
    """A folder the other user can enter (pytest's tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="state-unreadable-", dir="/tmp"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if not path.is_symlink():
                path.chmod(stat.S_IRWXU)
        shutil.rmtree(folder)


def state_in(base: Path, layout: str) -> tuple[Path, Path]:
    """The example state under ``base``, made unreadable as ``layout`` says; (the --cluster-state, what is
    unreadable)."""
    state = base / "state"
    shutil.copytree(EXAMPLE, state / "sub")
    for path in [state, *state.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    if layout == "folder":
        state.chmod(0)
        return state, state
    if layout == "sub-folder":
        (state / "sub").chmod(0)
        return state, state / "sub"
    if layout == "file":
        (state / "sub" / "state.yaml").chmod(0)
        return state, state / "sub" / "state.yaml"
    if layout == "parent":  # the folder itself fine, the way to it closed
        base.chmod(0o700)
        return state, state
    raise AssertionError(layout)


def run(base: Path, program: str, *args: str) -> subprocess.CompletedProcess[str]:
    module = {"colocation-webhook": "webhook.cli.webhook", "colocation-agent": "webhook.cli.agent"}[program]
    return subprocess.run(unprivileged([sys.executable, "-m", module, *args]), cwd="/", env=ENV, text=True,
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


COMMANDS = {
    "review": lambda s, base: ["colocation-webhook", "review", POD, "--cluster-state", s],
    "audit": lambda s, base: ["colocation-webhook", "audit", "-f", POD, "--cluster-state", s],
    "policies": lambda s, base: ["colocation-webhook", "policies", "--cluster-state", s],
    "serve": lambda s, base: ["colocation-webhook", "serve", "--cluster-state", s, "--cert-dir", f"{base}/certs",
                              "--port", str(free_port()), "--metrics-port", "0"],
    "agent once": lambda s, base: ["colocation-agent", "once", "--node-name", "n", "--cluster-state", s],
    "agent run": lambda s, base: ["colocation-agent", "run", "--node-name", "n", "--dry-run", "--metrics-port", "0",
                                  "--cluster-state", s],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_an_unreadable_folder(base: Path, command: str) -> None:
    state, unreadable = state_in(base, "folder")
    program, *args = COMMANDS[command](str(state), base)
    r = run(base, program, *args)
    assert (r.returncode, r.stderr.splitlines()[-1]) == (
        2, f"{program}: --cluster-state: {unreadable}: cannot list the folder: Permission denied"), r.stderr
    assert "Traceback" not in r.stderr
    assert not (base / "certs").exists()  # serve stopped before it wrote anything


@pytest.mark.parametrize(("layout", "error"), [
    ("sub-folder", "{path}: cannot list the folder: Permission denied"),
    ("file", "{path}:1: cannot read: Permission denied"),
    ("parent", "{path}: cannot read: Permission denied"),
])
def test_review_refuses_a_part_it_cannot_read(base: Path, layout: str, error: str) -> None:
    """The readable example denies nothing this pod asks: read as an empty state, its class would be missing."""
    state, unreadable = state_in(base, layout)
    r = run(base, "colocation-webhook", "review", POD, "--cluster-state", str(state), "-o", "patch")
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"colocation-webhook: --cluster-state: {error.format(path=unreadable)}\n")


def test_a_reload_that_cannot_read_keeps_the_last_good_state(base: Path) -> None:
    """As the other user, who owns the folder: it loads, a sub-folder loses its permissions, the reload fails and
    the state and metrics say so; the permissions back, the reload succeeds."""
    state = base / "state"
    shutil.copytree(EXAMPLE, state / "sub")
    if os.geteuid() == 0:
        for path in [state, *state.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
    script = textwrap.dedent(f"""
        import json, logging, os
        from pathlib import Path
        from prometheus_client import generate_latest
        from webhook.server.metrics import Metrics
        from webhook.cluster.files import FilesSource
        from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        state = ClusterState(WEBHOOK_KINDS)
        source = FilesSource(Path({str(state)!r}), state)
        source.load()
        os.chmod({str(state / "sub")!r}, 0)
        failed = source.reload()
        metrics = generate_latest(Metrics(state).registry).decode()
        kept = state.counts()
        os.chmod({str(state / "sub")!r}, 0o755)
        print(json.dumps({{"failed": failed, "kept": kept, "error": state.reload_error,
                          "failing": "colocation_webhook_cluster_state_reload_failing 1.0" in metrics,
                          "recovered": source.reload(), "after": state.reload_error}}))
    """)
    r = subprocess.run(unprivileged([sys.executable, "-c", script]), cwd="/", env=ENV, text=True,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == {"failed": False, "kept": got["kept"], "error": f"{state}/sub: cannot list the folder: "
                                                                  "Permission denied",
                   "failing": True, "recovered": True, "after": None}
    assert got["kept"]["PriorityClass"] == 4
    assert [line for line in r.stderr.splitlines() if line.startswith("ERROR")] == [
        f"ERROR cluster state reload failed, keeping the last good state: {state}/sub: cannot list the folder: "
        "Permission denied"]


# -- what needs no other user --------------------------------------------------------------------------------------------
def test_a_symlink_to_nothing_is_named(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "state")
    (tmp_path / "state" / "extra.yaml").symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(StateFileError) as caught:
        load_folder(tmp_path / "state")
    assert str(caught.value) == (f"{tmp_path}/state/extra.yaml: cannot read: a symlink to {tmp_path}/gone.yaml, "
                                 "which does not exist")


def test_a_symlinked_folder_to_nothing_is_named(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "state")
    (tmp_path / "state" / "base").symlink_to(tmp_path / "shared")
    with pytest.raises(StateFileError, match=r"state/base: cannot read: a symlink to .*/shared, which does not"):
        load_folder(tmp_path / "state")


def test_a_file_given_for_the_folder_is_named(tmp_path: Path) -> None:
    state = tmp_path / "state.yaml"
    shutil.copy(EXAMPLE / "state.yaml", state)
    with pytest.raises(StateFileError) as caught:
        load_folder(state)
    assert str(caught.value) == f"{state}: is a file, not a folder; the cluster state is a folder of manifests"


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(StateFileError) as caught:
        load_folder(tmp_path / "nowhere")
    assert str(caught.value) == f"{tmp_path}/nowhere: cluster state folder does not exist"
