"""Every document a comment, docstring or doc cites is one a reader of the repository can open.

A citation of notes kept outside the repository ("kubernetes.md §1.2", "seed 003", "the reference README")
sends a newcomer looking for a file that is not there. Upstream facts are cited by their
upstream source path (Kubernetes' ``pkg/...``, Koordinator's ``pkg/koordlet/...``), the project's own by its docs.
The team's shelf of notes, which no clone has, is tests/test_readme.py's to check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the repository ships and documents; the lock files are hashes only.
TREES = ("webhook", "bench", "tests", "docs", "manifests", "charts", "examples", "certs", ".ci")
FILES = ("README.md", "CHANGELOG.md", "Dockerfile", "setup.py", "pyproject.toml", ".dockerignore")
SKIP_DIRS = {"__pycache__", ".venv", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build"}

# Citations of documents that never were in the repository.
OUTSIDE = [
    (re.compile(r"[\w.-]+\.md\s*§"), "a section of a document by name"),
    (re.compile(r"\bseed[ -]?\d", re.IGNORECASE), "a seed document"),
    (re.compile(r"\breference README\b", re.IGNORECASE), "the reference README"),
    (re.compile(r"\bREADME deviation\b", re.IGNORECASE), "a deviation of the reference README"),
]
MARKDOWN_NAME = re.compile(r"(?<![\w./-])((?:\.{0,2}/)?[\w./-]*?[\w-]+\.md)\b")


def _files() -> Iterator[Path]:
    for name in FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            # this file names the patterns it looks for, as its examples
            if path.is_file() and not SKIP_DIRS.intersection(path.relative_to(ROOT).parts) \
                    and path != Path(__file__).resolve():
                yield path


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (UnicodeDecodeError, ValueError):
        return None  # a binary file (a certificate in DER, an image) cites nothing


def _markdown_files() -> tuple[set[str], set[Path]]:
    paths = {p.resolve() for p in _files() if p.suffix == ".md"}
    return {p.name for p in paths}, paths


def findings(path: Path, text: str, names: set[str], paths: set[Path]) -> list[str]:
    """Each citation in ``text`` of a document outside the repository, as ``path:line: what``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{n}"
        for pattern, what in OUTSIDE:
            for m in pattern.finditer(line):
                out.append(f"{where}: {what}: {m.group(0)!r}")
        for m in MARKDOWN_NAME.finditer(line):
            cited = m.group(1)
            if "://" in line[line.rfind(" ", 0, m.start()) + 1:m.end()]:
                continue  # a URL's path is the web site's, not ours
            if "/" in cited:
                if cited.startswith("/"):  # from the repository's root, as a link in its docs writes it
                    candidates = [(ROOT / cited.lstrip("/")).resolve()]
                else:
                    candidates = [(ROOT / path.parent / cited).resolve(), (ROOT / cited).resolve()]
                if not any(c in paths for c in candidates):
                    out.append(f"{where}: a document not in the repository: {cited!r}")
            elif cited not in names:
                out.append(f"{where}: a document not in the repository: {cited!r}")
    return out


def test_no_comment_cites_a_document_outside_the_repository() -> None:
    names, paths = _markdown_files()
    found = []
    for path in _files():
        text = _text(path)
        if text is not None:
            found += findings(path.relative_to(ROOT), text, names, paths)
    assert found == [], "cite the upstream source path or the project's docs instead:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_citation() -> None:
    names, paths = _markdown_files()
    here = Path("webhook/x.py")
    cited = {
        "# Priority rules (kubernetes.md §1.2)": "a section of a document by name",
        '"""Batch allocatable (seed 003)."""': "a seed document",
        "# the seed-000 message": "a seed document",
        "# fails closed (reference README §4)": "the reference README",
        "# upstream answers 500 (README deviation 5)": "a deviation of the reference README",
        "# see the notes' koordinator.md": "a document not in the repository",
        "# as koordinator.md says": "a document not in the repository",
        "# docs/nowhere.md": "a document not in the repository",
    }
    for line, what in cited.items():
        assert any(what in f for f in findings(here, line, names, paths)), line
    fine = ["# docs/agent.md, \"Batch resources\"", "# (deploy.md)", "# pkg/kubelet/eviction/helpers.go",
            "# https://github.com/koordinator-sh/koordinator/blob/main/README.md", "# random.seed(0)",
            "see [the manual](../docs/deploy.md)"]
    for line in fine:
        assert findings(Path("tests/x.py"), line, names, paths) == [], line
