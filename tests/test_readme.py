"""The README works as written: its shell blocks run, in order, right after its two set-up commands.

The first ``sh`` block installs and serves, the second installs and runs the tests; CI has just done the
install (``.ci/run``), so the first block's last command (``serve``) is started in the background and every later
block runs as written in a fresh folder holding only what a clone has (the repository's files, the venv).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serving import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VENV_BIN = Path(sys.prefix) / "bin"


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def tracked_files() -> list[Path]:
    """The files a clone has: git's list where this is a checkout, else every file but local state."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", "certs"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def test_no_tracked_file_names_the_team_shelf() -> None:
    shelf = "/".join(("..", "shared"))  # spelled apart so this file does not name it
    found = [str(p.relative_to(ROOT)) for p in tracked_files()
             if p.is_file() and shelf.encode() in p.read_bytes()]
    assert found == [], f"these files name {shelf}, which a user's clone does not have: {found}"


def test_the_set_up_blocks_are_the_ones_ci_runs() -> None:
    blocks = sh_blocks(README.read_text())
    assert len(blocks) >= 2, "the README starts with two sh blocks: install and serve, install and test"
    serve, tests = blocks[0].strip(), blocks[1].strip()
    assert serve.startswith("python3 -m venv .venv && ") and serve.endswith("colocation-webhook serve")
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == tests, "the last line of .ci/run is exactly the README's test command"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture()
def clone(tmp_path: Path) -> Iterator[Path]:
    """A folder with the repository's files and the installed venv, as right after the set-up commands."""
    if not (VENV_BIN / "colocation-webhook").exists():
        pytest.skip(f"the tests do not run from a venv with the project installed ({VENV_BIN})")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed; the README's checks use it")
    for p in tracked_files():
        if p.is_file():
            dest = tmp_path / p.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    yield tmp_path


def test_every_readme_command_works_as_written(clone: Path) -> None:
    """The README's ports (8443, 8080) are the reader's: a README server of their own may hold them while the
    tests run, so the same commands run here with free ports put in their place."""
    blocks = sh_blocks(README.read_text())
    ports = {"8443": str(free_port()), "8080": str(free_port())}

    def here(text: str) -> str:
        return re.sub(r"(?<=:)(8443|8080)\b", lambda m: ports[m.group(1)], text)

    serve_cmd = blocks[0].strip().split(" && ")[-1]
    assert serve_cmd.endswith("colocation-webhook serve"), "the README serves on the default ports"
    serve_cmd += f" --port {ports['8443']} --metrics-port {ports['8080']}"
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    server = subprocess.Popen(["bash", "-c", f"exec {serve_cmd}"], cwd=clone, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert server.stdout is not None  # stdout=PIPE
    try:
        deadline = time.monotonic() + 30
        while not _port_open(int(ports["8443"])):
            assert server.poll() is None, f"serve exited: {server.stdout.read().decode()}"
            assert time.monotonic() < deadline, "serve did not listen within 30 s"
            time.sleep(0.1)
        outputs = []
        for block in blocks[2:]:
            run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", here(block)], cwd=clone, env=env,
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, f"README block failed ({run.returncode}):\n{block}\n{run.stderr}"
            assert run.stdout.strip(), f"README block printed nothing:\n{block}"
            outputs.append(run.stdout)
        text = "\n".join(outputs)
        assert text.startswith("okok"), "healthz then readyz answer ok"
        assert '"patchType":"JSONPatch"' in text, "the recorded review gets a patch from /mutate"
        assert 'controller_runtime_webhook_requests_total{code="200",webhook="/mutate"} 1.0' in text
        assert "kubernetes.io/batch-cpu" in text, "review converts the example pod's cpu to batch-cpu"
        assert re.search(r"colo-demo +pod/batch-worker +- +changed", text) and "exit 1" in text, "audit finds it"
    finally:
        server.send_signal(signal.SIGTERM)  # the drain begins; a second signal ends it (a person's Ctrl-C)
        time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=15) == 0, "serve exits 0 on SIGTERM"


def _layout() -> list[str]:
    """The paths the README's Layout section names, one a line (continuation lines are indented past the names)."""
    section = README.read_text().split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return [line.split()[0] for line in block.splitlines()[1:] if line and not line.startswith(" ")]


def test_the_layout_names_every_package_and_only_what_is_there() -> None:
    named = _layout()
    assert len(named) > 10, "the Layout section's block is where this test looks"
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == [], f"README's Layout names what is not there: {missing}"
    packages = [p.parent for p in (ROOT / "webhook").rglob("__init__.py")]
    modules = [m for m in (ROOT / "webhook").glob("*.py") if m.stem != "__init__"]
    wanted = {f"{p.relative_to(ROOT).as_posix()}/" for p in packages} | {m.relative_to(ROOT).as_posix() for m in modules}
    # and what is at the top of the repository (not what git ignores, nor the README itself)
    top = {f"{p.name}/" if p.is_dir() else p.name for p in ROOT.iterdir()
           if p.name not in {"README.md", ".git", ".gitignore", ".dockerignore"} and p in tracked_tops()}
    absent = sorted((wanted | top) - set(named))
    assert absent == [], f"README's Layout does not name: {absent}"


def tracked_tops() -> set[Path]:
    return {ROOT / f.relative_to(ROOT).parts[0] for f in tracked_files()}
