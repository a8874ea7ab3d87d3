"""The code gates: ruff (the rules in pyproject.toml) over everything, ``mypy --strict`` over ``webhook/``.

Both are test extras, so the README's test command runs them and a finding fails CI like any other test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    pytest.importorskip("ruff", reason="ruff is a test extra: pip install -e '.[test]'")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "webhook", "tests", "bench", "harness"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_strict_finds_nothing(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is a test extra: pip install -e '.[test]'")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path)])
    assert status == 0, out + err


def test_type_ignores_name_their_reason() -> None:
    """``# type: ignore`` only where a third-party library forces it, with the reason said next to it."""
    bare = []
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if "# type: ignore" in line:
                context = line.split("# type: ignore", 1)[1] + (lines[n - 1] if n else "")
                if "#" not in context:
                    bare.append(f"{path.relative_to(ROOT)}:{n + 1}")
    assert bare == [], f"a type: ignore without its reason: {bare}"
