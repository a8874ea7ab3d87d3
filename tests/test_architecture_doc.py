"""docs/architecture.md's picture stays true: every module it names exists, and the rendered image shows what
its source says; the folders keep their owners (pure folders import no I/O, frameworks or clients)."""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOT = ROOT / "docs" / "architecture.dot"
SVG = ROOT / "docs" / "architecture.svg"
PURE = ["webhook/core", "webhook/admission/domain", "webhook/agent/domain", "webhook/admission/rules",
        # what judges an object as it enters the cluster state (the folder's sources around them are edges)
        "webhook/cluster/intake.py", "webhook/cluster/profiles.py", "webhook/cluster/validation.py"]
IMPURE_IMPORTS = {"os", "io", "socket", "subprocess", "threading", "asyncio", "time", "pathlib", "logging",
                  "urllib3", "kubernetes", "fastapi", "starlette", "uvicorn", "httpx", "watchfiles", "yaml"}


def test_every_module_the_picture_names_exists() -> None:
    named = set(re.findall(r"webhook/[\w/]+(?:\.py|/)", DOT.read_text()))
    assert named, "the picture names modules"
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert missing == [], f"docs/architecture.dot names what is not there: {missing}"
    rules = re.findall(r'^\s*r_\w+\s+\[label="(\w+/\w+)"\];', DOT.read_text(), flags=re.M)
    assert len(rules) == 9
    for name in rules:
        assert (ROOT / "webhook" / "admission" / "rules" / f"{name}.py").exists(), name


def test_the_rendered_picture_shows_every_box_of_its_source() -> None:
    svg = html.unescape(SVG.read_text())
    for label in re.findall(r'label="([^"]+)"', DOT.read_text()):
        first = label.split("\\n")[0]
        assert first in svg, f"architecture.svg is older than its source: no {first!r} (re-render it)"


@pytest.mark.parametrize("folder", PURE)
def test_pure_folders_do_no_io(folder: str) -> None:
    found = []
    paths = [ROOT / folder] if folder.endswith(".py") else sorted((ROOT / folder).rglob("*.py"))
    assert paths, f"{folder} holds no module: the check would pass on nothing"
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in IMPURE_IMPORTS]
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "open":
                found.append(f"{path.relative_to(ROOT)}: open()")
    assert found == [], f"{folder} is pure (no I/O, frameworks or clients): {found}"


def test_the_programs_share_only_the_kernel_and_the_state() -> None:
    """The webhook never imports the agent, and the agent never imports the webhook's code."""
    webhook = ("admission", "server", "policies", "audit")
    for folders, other in ((webhook, ("webhook.agent",)), (("agent",), tuple(f"webhook.{p}" for p in webhook))):
        for path in sorted(p for folder in folders for p in (ROOT / "webhook" / folder).rglob("*.py")):
            imports = {n.module for n in ast.walk(ast.parse(path.read_text()))
                       if isinstance(n, ast.ImportFrom) and n.module}
            leaked = sorted(m for m in imports if m.startswith(other))
            assert leaked == [], f"{path.relative_to(ROOT)} imports {leaked}"
