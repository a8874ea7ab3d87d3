"""A --cluster-state that cannot be read is an error naming it, for every command that reads one, never an empty
state: a folder, a sub-folder or a file without permission, a parent that cannot be entered, a symlink to nothing,
a file where a folder should be. A reload that meets one keeps the last good state and says so.

The tests run as root here, which reads everything: the commands run in a child process that drops to nobody
(``setpriv``), where the permissions hold. Nobody must reach what the commands need, the project's source and the
packages it imports: from a clone in a folder only its owner enters (root's home, ``mktemp -d``), they are copied
(hard-linked where they can be) to a folder under /tmp it can enter."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.serving import free_port
from webhook.cluster.files import StateFileError, load_folder

ROOT = Path(__file__).resolve().parents[2]
POD = Path("examples") / "pod-koord-batch.yaml"   # under the project's root
EXAMPLE = ROOT / "webhook" / "cluster" / "example"
# the interpreter's packages (a venv's site-packages): the child runs without site (-S), so reads only these
SITE = [Path(p) for p in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))]
NOBODY = 65534


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run as a user the permissions apply to."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, which reads any file, and no setpriv (util-linux) to drop to another user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def reachable(path: Path) -> bool:
    """Whether that user can enter and list ``path``, every folder above it included: asked of the kernel, as
    that user."""
    return subprocess.run(unprivileged(["test", "-r", str(path), "-a", "-x", str(path)]), cwd="/",
                          timeout=30).returncode == 0


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)   # the same file, and its mode: nothing to copy
    except OSError:
        shutil.copy2(src, dst)


def _entered(top: Path) -> None:
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


@dataclass(frozen=True)
class Runtime:
    """How the commands run as that user: the environment and where the example pod is."""

    env: dict[str, str]
    pod: str


def _copy_source(root: Path, into: Path) -> None:
    """webhook/ and, beside it, the shared library mypyc compiled its modules into (an editable compiled build
    keeps ``webhook_compiled__mypyc.*.so`` at the root of the tree)."""
    shutil.copytree(root / "webhook", into / "webhook", ignore=shutil.ignore_patterns("__pycache__"))
    for lib in root.glob("webhook_compiled__mypyc*"):
        shutil.copy2(lib, into / lib.name)


def runtime(root: Path, site: list[Path], spare: Path) -> Runtime:
    """The project's source at ``root`` (its webhook/ and example pod) and the packages in ``site``, each where
    the user can reach it: in place, or copied under ``spare`` (a folder that user can enter)."""
    source = root
    if not reachable(root):
        source = spare / "source"
        _copy_source(root, source)
        (source / POD).parent.mkdir(parents=True)
        shutil.copy(root / POD, source / POD)
        _entered(source)   # a clone made with umask 077 holds 0600 files
    packages = []
    for i, folder in enumerate(site):
        if not reachable(folder):
            folder = shutil.copytree(folder, spare / f"site-{i}", copy_function=_link_or_copy,
                                     ignore=shutil.ignore_patterns("__pycache__"))
        packages.append(str(folder))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), *packages])}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    probe = subprocess.run(unprivileged([sys.executable, "-S", "-c", "import webhook.cli.webhook, webhook.cli.agent, "
                                         "webhook.server.serving"]), cwd="/", env=env, text=True,
                           capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"uid {NOBODY} cannot run the programs here, even with the source and packages under {spare}: "
                    f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    return Runtime(env, str(source / POD))


def spare_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="state-unreadable-run-", dir="/tmp"))
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    spare = spare_folder()
    try:
        yield runtime(ROOT, SITE, spare)
    finally:
        shutil.rmtree(spare)


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


def run(rt: Runtime, program: str, *args: str) -> subprocess.CompletedProcess[str]:
    module = {"colocation-webhook": "webhook.cli.webhook", "colocation-agent": "webhook.cli.agent"}[program]
    return subprocess.run(unprivileged([sys.executable, "-S", "-m", module, *args]), cwd="/", env=rt.env, text=True,
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


COMMANDS = {
    "review": lambda s, base, pod: ["colocation-webhook", "review", pod, "--cluster-state", s],
    "audit": lambda s, base, pod: ["colocation-webhook", "audit", "-f", pod, "--cluster-state", s],
    "policies": lambda s, base, pod: ["colocation-webhook", "policies", "--cluster-state", s],
    "serve": lambda s, base, pod: ["colocation-webhook", "serve", "--cluster-state", s, "--cert-dir", f"{base}/certs",
                                   "--port", str(free_port()), "--metrics-port", "0"],
    "agent once": lambda s, base, pod: ["colocation-agent", "once", "--node-name", "n", "--cluster-state", s],
    "agent run": lambda s, base, pod: ["colocation-agent", "run", "--node-name", "n", "--dry-run", "--metrics-port",
                                       "0", "--cluster-state", s],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_an_unreadable_folder(rt: Runtime, base: Path, command: str) -> None:
    state, unreadable = state_in(base, "folder")
    program, *args = COMMANDS[command](str(state), base, rt.pod)
    r = run(rt, program, *args)
    assert (r.returncode, r.stderr.splitlines()[-1]) == (
        2, f"{program}: --cluster-state: {unreadable}: cannot list the folder: Permission denied"), r.stderr
    assert "Traceback" not in r.stderr
    assert not (base / "certs").exists()  # serve stopped before it wrote anything


@pytest.mark.parametrize(("layout", "error"), [
    ("sub-folder", "{path}: cannot list the folder: Permission denied"),
    ("file", "{path}:1: cannot read: Permission denied"),
    ("parent", "{path}: cannot read: Permission denied"),
])
def test_review_refuses_a_part_it_cannot_read(rt: Runtime, base: Path, layout: str, error: str) -> None:
    """The readable example denies nothing this pod asks: read as an empty state, its class would be missing."""
    state, unreadable = state_in(base, layout)
    r = run(rt, "colocation-webhook", "review", rt.pod, "--cluster-state", str(state), "-o", "patch")
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"colocation-webhook: --cluster-state: {error.format(path=unreadable)}\n")


def test_a_reload_that_cannot_read_keeps_the_last_good_state(rt: Runtime, base: Path) -> None:
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
    r = subprocess.run(unprivileged([sys.executable, "-S", "-c", script]), cwd="/", env=rt.env, text=True,
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


def test_the_commands_run_from_a_clone_the_other_user_cannot_enter(rt: Runtime, tmp_path: Path) -> None:
    """A clone with its venv in a folder only its owner enters (root's home, mktemp -d: tmp_path's own parents).
    ``rt``: the programs run as that user from this tree, so from the clone they must too."""
    clone = tmp_path / "clone"
    _copy_source(ROOT, clone)
    shutil.copytree(ROOT / "examples", clone / "examples")
    site = [shutil.copytree(SITE[0], clone / ".venv" / "site-packages", copy_function=_link_or_copy,
                            ignore=shutil.ignore_patterns("__pycache__"))]
    clone.chmod(0o700)
    if os.geteuid() == 0:
        assert not reachable(clone) and not reachable(site[0])
    spare = spare_folder()
    try:
        try:
            here = runtime(clone, site, spare)
        except pytest.skip.Exception as exc:
            pytest.fail(f"the programs run as uid {NOBODY} from {ROOT}, not from a clone it cannot enter: {exc}")
        r = run(here, "colocation-webhook", "review", here.pod, "-o", "patch")
    finally:
        shutil.rmtree(spare)
    assert (r.returncode, r.stdout.startswith("[")) == (0, True), r.stderr


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
