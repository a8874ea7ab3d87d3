"""The project's wheel, built once per test run as the image's build stage builds it, and a source tree compiled in
place made from it: what the Dockerfile's install test and the compiled-build tests share (conftest.py), so the
mypyc build (about a minute and a half of CPU) runs once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The project's own files the build stage copies, and its step that builds the project's wheel (Dockerfile; its
# test checks both are the Dockerfile's).
CONTEXT = ("pyproject.toml", "setup.py", "README.md", "webhook")
WHEEL_STEP = ("pip", "wheel", "--no-deps", "--wheel-dir", "/wheels", ".")
# A compiled build takes about 90 s of CPU on an idle core; on a loaded 2-core machine twice that.
BUILD_TIMEOUT = 480


def env() -> dict[str, str]:
    """The environment of a subprocess that must import what it was given, not this checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def copy_context(dest: Path) -> Path:
    """The project's files as the image's build context holds them: no caches, no in-place extensions."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in CONTEXT:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy(ROOT / name, dest / name)
    return dest


def build_wheel(work: Path) -> Path:
    """The Dockerfile's wheel step run in a copy of the build context; the wheel (compiled where a C compiler is)."""
    wheels = work / "wheels"
    context = copy_context(work / "src")
    step = [str(wheels) if a == "/wheels" else a for a in WHEEL_STEP]
    run = subprocess.run([sys.executable, "-m", *step[:2], "-q", *step[2:]], cwd=context, env=env(),
                         capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = wheels.glob("colocation_webhook-*.whl")
    return wheel


def source_tree(wheel: Path, dest: Path) -> Path:
    """A source tree as ``pip install -e .`` leaves it (the extensions beside their sources, setup.py beside the
    package), made from the wheel's files: its sources older than its extensions, as after a build."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    shutil.copy(ROOT / "setup.py", dest / "setup.py")
    for source in (dest / "webhook").rglob("*.py"):
        os.utime(source, (1_000_000_000, 1_000_000_000))
    return dest
