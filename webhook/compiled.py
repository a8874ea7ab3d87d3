"""Which modules the build compiles with mypyc (setup.py), whether this machine can, whether a source tree's
compiled modules are current (the build records a hash of each source it compiled; if one differs, importing them
from their sources), and which way the rules run.

The review's hot path, all pure (plain functions over plain data, no I/O): the shared core, the admission domain,
the rules and the chain that runs them. The edges (the server, the sources, the agent) stay plain Python: their
time goes to I/O and libraries, not to our code. Standard library only: setup.py reads this before anything is
installed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

SWITCH = "COLOCATION_WEBHOOK_COMPILE"  # "0": build plain Python
PACKAGE = Path(__file__).resolve().parent
# Written by setup.py into a wheel built as plain Python: why it was (a source tree is asked at run time instead).
BUILD_NOTE = "plain-build.txt"
REBUILD = "pip install -e ."

_PURE_PACKAGES = ("webhook.core", "webhook.admission.domain", "webhook.admission.rules.mutating",
                  "webhook.admission.rules.validating")
# The cluster state's judgements are pure too, and were compiled in core/ and admission/domain/ before they moved
# into cluster/ (what enters the state: docs/architecture.md); the profile a rule matches on is their class.
_MODULES = ("webhook.admission.chain", "webhook.admission.context", "webhook.cluster.profiles",
            "webhook.cluster.validation")


def compiler_missing() -> str | None:
    """Why C extensions cannot be built here (no C compiler, no Python headers), or None."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(os.environ.get("CC", cc).split()[0]) is None:
        return f"no C compiler ({os.environ.get('CC', cc)})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (Python.h; Debian: python3-dev)"
    return None


def module_path(module: str) -> str:
    """``webhook.core.quantity`` -> ``webhook/core/quantity.py`` (relative to the project)."""
    return module.replace(".", "/") + ".py"


def compiled_modules(package: Path = PACKAGE) -> tuple[str, ...]:
    """The modules the build compiles, found in ``package``: every module of the pure packages, and the chain."""
    found: list[str] = []
    for name in _PURE_PACKAGES:
        folder = package.parent / name.replace(".", "/")
        found += sorted(f"{name}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__")
    return (*found, *_MODULES)


COMPILED_MODULES = compiled_modules()


def record_name(suffix: str) -> str:
    """The file, in the package, where a build whose extensions end in ``suffix`` records the sources it compiled:
    ``.cpython-311-x86_64-linux-gnu.so`` -> ``compiled-sources.cpython-311-x86_64-linux-gnu.json``. One per
    extension suffix, as the extensions are: builds for other Pythons in the same tree keep their own."""
    return "compiled-sources" + suffix.rpartition(".")[0] + ".json"


def source_hash(source: Path) -> str:
    """What the build records of a source, and what the check compares: its content (sha256), never its file time,
    which ``touch`` and ``git checkout`` move without changing the code."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def source_hashes(root: Path, modules: Sequence[str]) -> dict[str, str]:
    """``webhook/core/quantity.py`` -> its hash, for each of ``modules`` in the project at ``root``."""
    return {module_path(m): source_hash(root / module_path(m)) for m in modules}


def write_record(package: Path, suffix: str, hashes: dict[str, str]) -> Path:
    """Records, beside a build's extensions, the hashes of the sources it compiled (setup.py, once it succeeded)."""
    record = package / record_name(suffix)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"sources": dict(sorted(hashes.items()))}, indent=1) + "\n")
    return record


def read_record(package: Path, suffix: str) -> dict[str, str] | None:
    """The hashes a build with extensions ending in ``suffix`` recorded, or None without a readable record."""
    try:
        sources = json.loads((package / record_name(suffix)).read_text())["sources"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(sources, dict):
        return None
    return {str(k): str(v) for k, v in sources.items()}


def _extension(source: Path) -> str | None:
    """The suffix of the extension Python would import instead of ``source``, if one is beside it."""
    return next((s for s in importlib.machinery.EXTENSION_SUFFIXES
                 if source.with_name(source.stem + s).is_file()), None)


def stale_modules(package: Path = PACKAGE) -> list[str]:
    """The compiled modules of a source tree (``package`` beside a setup.py) whose source is not the one their build
    compiled, as ``webhook/core/quantity.py``: its hash differs from the build's record, or the build left no record
    (unrecorded_build says which). Python imports the extension before the .py beside it, so these would run the
    code as it was at the build. File times are not read: a touched or checked-out file with the same content is
    current. An installed package (no setup.py beside it) is not checked: it is the wheel it was installed from."""
    if not (package.parent / "setup.py").is_file():
        return []
    records: dict[str, dict[str, str] | None] = {}
    stale: list[str] = []
    for module in compiled_modules(package):
        source = package.parent / module_path(module)
        suffix = _extension(source)
        if suffix is None or not source.is_file():
            continue
        if suffix not in records:
            records[suffix] = read_record(package, suffix)
        record = records[suffix]
        if record is None or record.get(module_path(module)) != source_hash(source):
            stale.append(module_path(module))
    return stale


def unrecorded_build(package: Path = PACKAGE) -> str | None:
    """The record a source tree's compiled modules lack (``webhook/compiled-sources.cpython-311-….json``), when they
    were built without one (by a setup.py from before records, or a build that failed part way), else None."""
    if not (package.parent / "setup.py").is_file():
        return None
    for module in compiled_modules(package):
        suffix = _extension(package.parent / module_path(module))
        if suffix is not None and read_record(package, suffix) is None:
            return f"{package.name}/{record_name(suffix)}"
    return None


def is_compiled(module: str) -> bool:
    """Whether ``module`` (imported here if it was not) runs as a compiled extension."""
    return not str(getattr(importlib.import_module(module), "__file__", "")).endswith(".py")


class SourceFinder(importlib.abc.MetaPathFinder):
    """Imports every compiled module of a source tree from its .py source, ahead of the extension beside it.

    All or none: mypyc builds the modules as one group whose functions call each other directly in C, so a compiled
    caller would still run the old code of a module imported from its source alone."""

    def __init__(self, package: Path = PACKAGE) -> None:
        self.sources = {m: package.parent / module_path(m) for m in compiled_modules(package)}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        source = self.sources.get(fullname)
        if source is None or not source.is_file():
            return None
        return importlib.util.spec_from_file_location(
            fullname, source, loader=importlib.machinery.SourceFileLoader(fullname, str(source)))


BYPASSED: list[str] = []  # the stale modules that made this process import the compiled modules from their sources
UNRECORDED: list[str] = []  # the record the tree's compiled build lacks, when that was why


def bypass_stale(package: Path = PACKAGE) -> list[str]:
    """When any compiled module of this source tree is not what its build compiled, import them all from their
    sources (SourceFinder) and return the stale ones; run before any of them is imported (webhook/__init__.py)."""
    stale = stale_modules(package)
    if stale and not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder(package))
        BYPASSED[:] = stale
        missing = unrecorded_build(package)
        UNRECORDED[:] = [missing] if missing else []
    return stale


def _why_stale(stale: Sequence[str], unrecorded: str | None, short: bool) -> str:
    if unrecorded:
        return f"the compiled build has no record of the sources it compiled ({unrecorded})"
    rest = len(stale) - 3
    more = "" if rest <= 0 else " …" if short else f" and {rest} more"
    return f"{', '.join(stale[:3])}{more} changed after the compiled build"


def stale_warning(stale: Sequence[str], unrecorded: str | None = None) -> str:
    """The one line that says the rules run as plain Python because of ``stale`` (or a build without a record), and
    how to compile them again."""
    return (f"colocation-webhook: {_why_stale(stale, unrecorded, short=False)}: the rules run as plain Python "
            f"(about 1.6 times slower) until `{REBUILD}` compiles them again")


def rules_status(package: Path = PACKAGE) -> str:
    """One line for ``--version``: whether the rules run compiled or as plain Python, and why. Looks the chain
    up without importing it."""
    spec = importlib.util.find_spec("webhook.admission.chain")
    if spec is not None and spec.origin is not None and not spec.origin.endswith(".py"):
        return "rules: compiled with mypyc"
    if BYPASSED:
        unrecorded = UNRECORDED[0] if UNRECORDED else None
        why = f"{_why_stale(BYPASSED, unrecorded, short=True)}; `{REBUILD}` compiles it again"
    elif (package / BUILD_NOTE).is_file():
        why = "built with " + (package / BUILD_NOTE).read_text().strip()
    elif (package.parent / "setup.py").is_file():
        why = f"this source tree holds no compiled build: {compiler_missing() or f'`{REBUILD}` compiles it'}"
    else:
        why = "installed without a compiled build"
    return f"rules: plain Python ({why})"
