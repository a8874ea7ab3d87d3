"""Which modules the build compiles with mypyc (setup.py), whether this machine can, and whether a source tree's
compiled modules are current.

The review's hot path, all pure (plain functions over plain data, no I/O): the shared core, the admission domain,
the rules and the chain that runs them. The edges (the server, the sources, the agent) stay plain Python: their
time goes to I/O and libraries, not to our code. Standard library only: setup.py reads this before anything is
installed.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import shutil
import sysconfig
from pathlib import Path

SWITCH = "COLOCATION_WEBHOOK_COMPILE"  # "0": build plain Python
PACKAGE = Path(__file__).resolve().parent

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
