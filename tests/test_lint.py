"""The code gates: ruff (the rules in pyproject.toml) over everything, ``mypy --strict`` over ``webhook/`` and what
holds it to account (``tests/``, ``harness/``, ``bench/``: the packages of pyproject.toml's [tool.mypy]).

Both are test extras, so the README's test command runs them and a finding fails CI like any other test.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("webhook", "tests", "harness", "bench")  # what mypy checks, and where its ignores must say why


def test_ruff_finds_nothing() -> None:
    pytest.importorskip("ruff", reason="ruff is a test extra: pip install -e '.[test]'")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "webhook", "tests", "bench", "harness"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_checks_the_code_and_its_tests() -> None:
    """The config names every tree, so a bare ``mypy`` and the gate below check the same files."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert sorted(config["packages"]) == sorted(CHECKED)


def test_mypy_strict_finds_nothing(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is a test extra: pip install -e '.[test]'")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path)])
    assert status == 0, out + err


def test_type_ignores_name_their_reason() -> None:
    """``# type: ignore[code]`` only where a third-party library forces it, with the reason said next to it."""
    bare = []
    for path in sorted(p for tree in CHECKED for p in (ROOT / tree).rglob("*.py")):
        lines = path.read_text().splitlines()
        with path.open("rb") as f:
            comments = [(t.start[0], t.string) for t in tokenize.tokenize(f.readline) if t.type == tokenize.COMMENT]
        for n, comment in comments:
            if "type: ignore" in comment:
                after = comment.split("type: ignore", 1)[1]
                context = after + (lines[n - 2] if n > 1 else "")
                if not re.match(r"\[[a-z-]+(, *[a-z-]+)*\]", after) or "#" not in context:
                    bare.append(f"{path.relative_to(ROOT)}:{n}")
    assert bare == [], f"a type: ignore without its error code or its reason: {bare}"
