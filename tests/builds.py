"""The project's wheel, built once per test run as the image's build stage builds it, and a source tree compiled in
place made from it: what the Dockerfile's install test and the compiled-build tests share (conftest.py), so the
mypyc build (about a minute and a half of CPU, most of it one C compiler process) runs once, and in the background
from the start of a run that needs it (``WheelBuild``): on two cores it overlaps the tests before those."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The project's own files the build stage copies, and its step that builds the project's wheel (Dockerfile; its
# test checks both are the Dockerfile's). The step builds with the build requirements already installed
# (requirements-build.lock there; requirements-test.lock, which holds them at the same versions, here).
CONTEXT = ("pyproject.toml", "setup.py", "README.md", "webhook")
WHEEL_STEP = ("pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", "/wheels", ".")
# A compiled build is minutes of CPU on a loaded 2-core machine (docs/benchmarks.md, "Figures behind the code's
# comments"): the timeout leaves room for that.
BUILD_TIMEOUT = 480


def env() -> dict[str, str]:
    """The environment of a subprocess that must import what it was given, not this checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def copy_context(dest: Path) -> Path:
    """The project's files as the image's build context holds them: no caches, no in-place build (.dockerignore)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in CONTEXT:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so", "compiled-sources.*.json"))
        else:
            shutil.copy(ROOT / name, dest / name)
    return dest


class WheelBuild:
    """The Dockerfile's wheel step, started in a copy of the build context (a lower CPU priority than the tests
    running meanwhile); ``wheel()`` waits for it and gives the wheel (compiled where a C compiler is).

    Under pytest-xdist every worker collects the whole run: the first to make the run's folder builds, the others
    wait for the marker it writes when done."""

    def __init__(self) -> None:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        if run is None:
            self.work, self.shared = Path(tempfile.mkdtemp(prefix="colocation-wheel-")), False
        else:
            self.work, self.shared = Path(tempfile.gettempdir()) / f"colocation-wheel-{run}", True
        self.wheels, self.done = self.work / "wheels", self.work / "done"
        self.process: subprocess.Popen[str] | None = None
        try:
            self.work.mkdir(exist_ok=not self.shared)
        except FileExistsError:
            return  # another worker builds
        step = [str(self.wheels) if a == "/wheels" else a for a in WHEEL_STEP]
        self.process = subprocess.Popen([sys.executable, "-m", *step[:2], "-q", *step[2:]],
                                        cwd=copy_context(self.work / "src"), env=env(), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: os.nice(5))
        threading.Thread(target=self._finish, args=(self.process,), daemon=True).start()

    def _finish(self, process: subprocess.Popen[str]) -> None:
        output, _ = process.communicate()
        (self.work / "output").write_text(output)
        (self.work / "done.tmp").write_text(str(process.returncode))
        (self.work / "done.tmp").rename(self.done)

    def wheel(self) -> Path:
        deadline = time.monotonic() + BUILD_TIMEOUT
        while not self.done.is_file():
            assert time.monotonic() < deadline, f"the wheel was not built within {BUILD_TIMEOUT} s"
            time.sleep(0.2)
        assert self.done.read_text() == "0", (self.work / "output").read_text()
        (wheel,) = self.wheels.glob("colocation_webhook-*.whl")
        return wheel

    def stop(self) -> None:
        """At the end of the run: the build ended, its folder removed (left to the workers' shared run)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if not self.shared:
            shutil.rmtree(self.work, ignore_errors=True)


def source_tree(wheel: Path, dest: Path) -> Path:
    """A source tree as ``pip install -e .`` leaves it (the extensions beside their sources, the record of the
    sources they were built from, setup.py beside the package), made from the wheel's files. Their times are the
    extraction's, in no particular order: the check compares content (webhook/compiled.py)."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    shutil.copy(ROOT / "setup.py", dest / "setup.py")
    return dest
