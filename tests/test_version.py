"""One version: pyproject.toml's is the image tag the manifests set and the docs push, the Dockerfile's label, what
both programs' ``--version`` print, the newest release in CHANGELOG.md, and the Helm chart's
Chart.yaml's version and appVersion (and its image tag, when its values set one)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_dockerfile import parse

ROOT = Path(__file__).resolve().parents[1]
VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART = ROOT / "charts" / "colocation-webhook"
# Where an image tag of ours is written for an operator to copy: docs, README, manifests, Dockerfile (CHANGELOG.md
# names earlier releases on purpose).
TAGGED = re.compile(r"colocation-webhook:(\d+\.\d+\.\d+[\w.+-]*)")


def _tagged_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "Dockerfile", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "manifests").rglob("*.yaml"))]


def version_findings(version: str, texts: dict[str, str]) -> list[str]:
    """Each image tag in ``texts`` (name -> text) that is not ``version``."""
    return [f"{name}: colocation-webhook:{tag}" for name, text in texts.items()
            for tag in TAGGED.findall(text) if tag != version]


def test_the_image_tag_is_the_version() -> None:
    setting = yaml.safe_load((ROOT / "manifests" / "components" / "image" / "kustomization.yaml").read_text())
    assert [i["newTag"] for i in setting["images"]] == [VERSION], "the one image setting tags the release"
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in _tagged_files()}
    assert sum(len(TAGGED.findall(t)) for t in texts.values()) >= 3, "the docs show the tag to push"
    assert version_findings(VERSION, texts) == []


def test_the_check_finds_another_tag() -> None:
    assert version_findings("1.2.0", {"a-page": "docker push r/colocation-webhook:1.2.0 && colocation-webhook:1.1.9"}) \
        == ["a-page: colocation-webhook:1.1.9"]


def test_the_dockerfile_labels_the_version() -> None:
    args, _ = parse((ROOT / "Dockerfile").read_text())
    assert args["VERSION"] == VERSION


@pytest.mark.parametrize("program", ["webhook", "agent"])
def test_both_programs_print_the_version(program: str) -> None:
    out = subprocess.run([sys.executable, "-m", f"webhook.cli.{program}", "--version"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"colocation-{program} {VERSION}"


def test_the_changelog_names_the_version_as_the_newest_release() -> None:
    releases = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases[:2] == ["Unreleased", VERSION], "Unreleased first, then this version"


def chart_findings(version: str, chart: dict[str, object], values: dict[str, object] | None) -> list[str]:
    found = [f"Chart.yaml {key}: {chart.get(key)!r}" for key in ("version", "appVersion")
             if str(chart.get(key)) != version]
    image = (values or {}).get("image")
    if isinstance(image, dict) and image.get("tag") not in (None, "", version):
        found.append(f"values.yaml image.tag: {image['tag']!r}")
    return found


def test_the_chart_carries_the_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart_findings(VERSION, chart, values) == []


def test_the_chart_check_finds_another_version() -> None:
    assert chart_findings("1.0.0", {"version": "1.0.0", "appVersion": "1.0.0"}, {"image": {"tag": ""}}) == []
    assert chart_findings("1.0.0", {"version": "0.9.0", "appVersion": "1.0.0"}, {"image": {"tag": "0.9.0"}}) == [
        "Chart.yaml version: '0.9.0'", "values.yaml image.tag: '0.9.0'"]
