"""Build: the pure core and the admission rules compiled with mypyc, everything else as plain Python.

The project is described in pyproject.toml; this file only adds the compiled modules. They are listed in
webhook/compiled.py: plain typed Python (mypy --strict clean) that mypyc compiles to C extensions, which answers a
review's rules about 1.6 times as fast (docs/benchmarks.md). The .py files stay in the package beside them, and the
same sources run as plain Python wherever they are not compiled:

- ``COLOCATION_WEBHOOK_COMPILE=0 pip install ...`` builds plain Python on purpose;
- without a C compiler or the Python headers (``python3-dev``) the build says so and is plain Python.

A wheel built as plain Python records why (``webhook/plain-build.txt``), which ``--version`` prints. An editable
install (``pip install -e .``) compiles into the source tree (``webhook/**/*.so``): after an edit to a compiled
module, the tree runs every compiled module from its source, with one warning line, until the install is run again
(webhook/compiled.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The one list of what is compiled, read from its file: importing the package would run its check of an earlier
# build, which this build is about to replace.
_spec = importlib.util.spec_from_file_location("_compiled", ROOT / "webhook" / "compiled.py")
assert _spec is not None and _spec.loader is not None
_compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_compiled)
COMPILED_MODULES, SWITCH, module_path = _compiled.COMPILED_MODULES, _compiled.SWITCH, _compiled.module_path
compiler_missing, BUILD_NOTE = _compiled.compiler_missing, _compiled.BUILD_NOTE
PLAIN_BECAUSE: list[str] = []  # why this build is plain Python, when it is


def _remove_earlier_build() -> None:
    """A plain build in a tree that was compiled in place: the extensions left there would shadow the sources."""
    for module in COMPILED_MODULES:
        source = ROOT / module_path(module)
        for built in source.parent.glob(source.stem + ".*.so"):
            built.unlink()
    for shared in ROOT.glob("webhook_compiled__mypyc.*.so"):
        shared.unlink()


# The commands that build. pip runs this file once per step (its requirements, the metadata, then the wheel), and
# mypycify type-checks and translates every module each time it is called (~10 s): only these get the extensions.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def ext_modules() -> list[object]:
    if not BUILDS & set(sys.argv[1:]):
        return []
    why = f"{SWITCH}=0" if os.environ.get(SWITCH, "1") == "0" else compiler_missing() or ""
    if why:
        print(f"colocation-webhook: {why}: the rules are built as plain Python (correct, about 1.6 times slower)",
              file=sys.stderr)
        PLAIN_BECAUSE.append(why)
        _remove_earlier_build()
        return []
    from mypyc.build import mypycify

    os.chdir(ROOT)  # mypycify takes paths relative to the project
    return list(mypycify([module_path(m) for m in COMPILED_MODULES], opt_level="3",
                         group_name="webhook_compiled"))


class BuildPy(build_py):
    """Also writes, into a plain build's package, why it is plain (an editable install's tree has its sources)."""

    def run(self) -> None:
        super().run()
        if PLAIN_BECAUSE and not getattr(self, "editable_mode", False):
            (Path(self.build_lib) / "webhook" / BUILD_NOTE).write_text(PLAIN_BECAUSE[0] + "\n")


setup(ext_modules=ext_modules(), cmdclass={"build_py": BuildPy})
