"""Tests mirror the code: the tests of ``webhook/<package>/<module>.py`` are ``tests/<package>/test_<module>.py``
(or ``test_<module>_<aspect>.py``), so a module's tests are found from its path (docs/architecture.md, "Where the
tests are"). Whole programs are tested in folders of their own, and what checks the repository as a whole stays
at the top."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# Whole programs as a user or the apiserver meets them: no one module to mirror.
PROGRAM_FOLDERS = {"cli", "e2e", "deploy"}
# The repository as a whole, and webhook/compiled.py (a module at the package's top).
TOP = {"test_architecture_doc.py", "test_bench_scripts.py", "test_cel_check.py", "test_citations.py", "test_compiled.py",
       "test_import_cycles.py", "test_layout.py", "test_lint.py", "test_lock.py", "test_readme.py"}
# Tests of a package's contract rather than of one module.
CONTRACTS = {"admission/rules/test_contract.py"}


def _mirrors(test: Path) -> bool:
    folder = ROOT / "webhook" / test.parent.relative_to(TESTS)
    name = test.stem.removeprefix("test_")
    return any(name == m.stem or name.startswith(m.stem + "_") for m in folder.glob("*.py") if m.stem != "__init__")


def test_every_test_file_is_named_after_the_module_it_tests() -> None:
    astray = []
    for test in sorted(TESTS.rglob("test_*.py")):
        where = test.relative_to(TESTS)
        if where.parts[0] in PROGRAM_FOLDERS | {"fixtures"} or where.as_posix() in CONTRACTS:
            continue
        if len(where.parts) == 1:
            if test.name not in TOP:
                astray.append(str(where))
        elif not _mirrors(test):
            astray.append(str(where))
    assert astray == [], f"tests not named after a module of webhook/ (tests/<package>/test_<module>.py): {astray}"


def test_every_test_folder_is_a_package() -> None:
    """``tests.cluster.test_live`` imports like any module, and two test files of one name in two folders do not
    clash."""
    folders = {p.parent for p in TESTS.rglob("test_*.py")}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert missing == [], f"test folders without __init__.py: {missing}"
