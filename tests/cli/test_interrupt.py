"""Ctrl-C at any moment of a program's life ends in its one line and its documented code (README, exit codes: 130
before the work was done; ``serve`` and the agent's ``run`` stop with 0), never a KeyboardInterrupt traceback: not
while the console script imports the command line (issue 41), nor while a command's flags are built, nor once the
work is done.

The programs run as installed (the venv's console scripts), with ``PYTHONPROFILEIMPORTTIME`` (Python's
``-X importtime``): each import it reports on stderr as it completes is a moment to interrupt at, the same on a
fast machine and a loaded one. Times count from Python's own ``site``: before it is imported, no code of the
project's has run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INTERRUPTED = "interrupted (Ctrl-C) before the work was done"
# (after this import has completed, this many seconds more)
MOMENTS = [("webhook.compiled", 0.0), ("webhook.cli.common", 0.0), ("site", 0.05), ("site", 0.2), ("site", 0.5)]


def _commands(tmp: Path) -> dict[str, tuple[list[str], int]]:
    """Each program's commands as they wait for something (stdin, a CPU sample, a stop), and the code Ctrl-C ends
    them in."""
    return {
        "review": (["colocation-webhook", "review", "-"], 130),
        "audit": (["colocation-webhook", "audit", "-f", "-"], 130),
        "serve": (["colocation-webhook", "serve", "--port", str(free_port()), "--metrics-port", "0",
                   "--cert-dir", str(tmp / "certs"), "--drain-delay", "0"], 0),
        "once": (["colocation-agent", "once", "--node-name", "n", "--cpu-sample-seconds", "30"], 130),
        "run": (["colocation-agent", "run", "--node-name", "n", "--dry-run", "--metrics-port", "0",
                 "--cluster-state", str(ROOT / "webhook" / "cluster" / "example")], 0),
    }


def _interrupted(argv: list[str], after: str, delay: float) -> tuple[int, list[str]]:
    """Run ``argv``, send SIGINT ``delay`` seconds after the import ``after`` completed; (code, stderr lines but
    the import times)."""
    program = BIN / argv[0]
    if not program.is_file():
        pytest.skip(f"{program} is not installed (pip install -e .)")
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen([str(program), *argv[1:]], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stderr is not None
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == after:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(30), f"{after} was never imported: {lines[-5:]}"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=10)
    return code, [line for line in lines if not line.startswith("import time:")]


@pytest.mark.parametrize(("after", "delay"), MOMENTS, ids=[f"{a}+{d:g}s" for a, d in MOMENTS])
@pytest.mark.parametrize("command", ["review", "audit", "serve", "once", "run"])
def test_ctrl_c_at_any_moment_is_one_line_and_the_documented_code(tmp_path: Path, command: str, after: str,
                                                                  delay: float) -> None:
    argv, expected = _commands(tmp_path)[command]
    code, err = _interrupted(argv, after, delay)
    assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in err), "\n".join(err)
    assert code == expected, "\n".join(err)
    if expected == 130:
        assert err[-1] == f"{argv[0]}: {INTERRUPTED}", "\n".join(err)


def test_ctrl_c_once_the_work_is_done_changes_nothing(tmp_path: Path) -> None:
    """The answer is out and the code decided: an interrupt while the interpreter ends is no traceback and no
    death by the signal."""
    program = BIN / "colocation-webhook"
    if not program.is_file():
        pytest.skip(f"{program} is not installed (pip install -e .)")
    env = {**os.environ}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    # an atexit hook that takes its time: the moment after main returned, found without guessing
    hook = tmp_path / "sitecustomize.py"
    hook.write_text("import atexit, pathlib, time\n"
                    f"atexit.register(lambda: (pathlib.Path({str(tmp_path / 'done')!r}).touch(), time.sleep(2)))\n")
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.Popen([str(program), "review", str(ROOT / "examples" / "pod-koord-batch.yaml"), "-o", "patch"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "done").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, "Traceback" in err) == (0, False), err
    assert out.startswith("[")
