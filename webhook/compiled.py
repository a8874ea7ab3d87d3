"""Which modules the build compiles with mypyc (setup.py), whether this machine can, whether a source tree's
compiled modules are current (and if not, importing them from their sources), and which way the rules run.

The review's hot path, all pure (plain functions over plain data, no I/O): the shared core, the admission domain,
the rules and the chain that runs them. The edges (the server, the sources, the agent) stay plain Python: their
time goes to I/O and libraries, not to our code. Standard library only: setup.py reads this before anything is
installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
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

_PURE_PACKAGES = ("webhook.core", "webhook.admission.domain", "webhook.admission.rules")
_MODULES = ("webhook.admission.chain", "webhook.admission.context")


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


def stale_modules(package: Path = PACKAGE) -> list[str]:
    """The compiled modules of a source tree (``package`` beside a setup.py) whose source changed after the
    build, as ``webhook/core/quantity.py``. Python imports the extension before the .py beside it, so these
    would run the code as it was at the build. An installed package (no setup.py beside it) is never stale:
    an installer writes its files in any order."""
    if not (package.parent / "setup.py").is_file():
        return []
    stale: list[str] = []
    for module in compiled_modules(package):
        source = package.parent / module_path(module)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            built = source.with_name(source.stem + suffix)
            if built.is_file() and source.is_file() and source.stat().st_mtime > built.stat().st_mtime:
                stale.append(module_path(module))
                break
    return stale


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


def bypass_stale(package: Path = PACKAGE) -> list[str]:
    """When any compiled module of this source tree is older than its source, import them all from their sources
    (SourceFinder) and return the stale ones; run before any of them is imported (webhook/__init__.py)."""
    stale = stale_modules(package)
    if stale and not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder(package))
        BYPASSED[:] = stale
    return stale


def stale_warning(stale: Sequence[str]) -> str:
    """The one line that says the rules run as plain Python because of ``stale``, and how to compile them again."""
    named = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
    return (f"colocation-webhook: {named} changed after the compiled build: the rules run as plain Python "
            f"(about 1.6 times slower) until `{REBUILD}` compiles them again")


def rules_status(package: Path = PACKAGE) -> str:
    """One line for ``--version``: whether the rules run compiled or as plain Python, and why. Looks the chain
    up without importing it."""
    spec = importlib.util.find_spec("webhook.admission.chain")
    if spec is not None and spec.origin is not None and not spec.origin.endswith(".py"):
        return "rules: compiled with mypyc"
    if BYPASSED:
        named = ", ".join(BYPASSED[:3]) + (" …" if len(BYPASSED) > 3 else "")
        why = f"{named} changed after the compiled build; `{REBUILD}` compiles it again"
    elif (package / BUILD_NOTE).is_file():
        why = "built with " + (package / BUILD_NOTE).read_text().strip()
    elif (package.parent / "setup.py").is_file():
        why = f"this source tree holds no compiled build: {compiler_missing() or f'`{REBUILD}` compiles it'}"
    else:
        why = "installed without a compiled build"
    return f"rules: plain Python ({why})"
