"""The dependency lock: requirements.lock (what the image runs, Dockerfile) and requirements-test.lock (that and the
test extras, what CI and the README's test command install) pin every package with its hashes, agree with each
other and with pyproject.toml's ranges, and this run's environment is what they pin. `bash .ci/lock` makes them."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The versions the image is built from for the libraries whose internals the code reads (pyproject.toml says
# which): moving any of them is a change to review with the tests that name those internals, not a lock refresh.
IMAGE_PINS = {"uvicorn": "0.54.0", "httptools": "0.9.0", "kubernetes": "37.0.2"}


def pins(name: str) -> dict[str, str]:
    """Package -> version of a lock file, each entry checked to carry at least one sha256 hash."""
    text = (ROOT / name).read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2] if text.startswith("#") else text)
    found: dict[str, str] = {}
    for entry in entries:
        m = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", entry)
        assert m, f"{name}: not a pinned requirement: {entry.splitlines()[0]!r}"
        assert "--hash=sha256:" in entry, f"{name}: {m.group(1)} has no hash"
        found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def _unmet(requirements: list[str], locked: dict[str, str]) -> list[str]:
    unmet = []
    for line in requirements:
        req = Requirement(line)
        version = locked.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            unmet.append(f"{line} (locked: {version})")
    return unmet


def test_every_locked_package_is_pinned_with_hashes() -> None:
    assert len(pins("requirements.lock")) >= len(PYPROJECT["dependencies"])
    assert len(pins("requirements-test.lock")) > len(pins("requirements.lock"))


def test_the_locks_meet_pyproject_and_agree_with_each_other() -> None:
    runtime, test = pins("requirements.lock"), pins("requirements-test.lock")
    assert _unmet(PYPROJECT["dependencies"], runtime) == []
    assert _unmet([*PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"]["test"]], test) == []
    assert {k: v for k, v in test.items() if k in runtime} == runtime, "the tests run what the image runs"


def test_the_image_is_built_from_the_tested_series() -> None:
    runtime = pins("requirements.lock")
    assert {k: runtime[k] for k in IMAGE_PINS} == IMAGE_PINS
    bounded = {str(canonicalize_name(Requirement(r).name)): Requirement(r).specifier for r in PYPROJECT["dependencies"]
               if any(s.operator == "<" for s in Requirement(r).specifier)}
    assert set(bounded) == {"uvicorn", "kubernetes"}, "pyproject bounds what the code reaches into"
    assert str(bounded["uvicorn"]) == "<0.55,>=0.54", "uvicorn: the minor series the edge was tested on"


def test_this_run_uses_the_locked_versions() -> None:
    """CI installs from requirements-test.lock: a test run on other versions is not the image's."""
    off = []
    for name, version in pins("requirements-test.lock").items():
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = "not installed"
        if have != version:
            off.append(f"{name} {have} (locked {version})")
    assert off == [], "install from the lock: pip install --require-hashes -r requirements-test.lock"
