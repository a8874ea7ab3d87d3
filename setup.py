"""Build: the pure core and the admission rules compiled with mypyc, everything else as plain Python.

The project is described in pyproject.toml; this file only adds the compiled modules. They are listed in
webhook/compiled.py: plain typed Python (mypy --strict clean) that mypyc compiles to C extensions, which answers a
review's rules faster (docs/benchmarks.md, "Compiled"). The .py files stay in the package beside them, and the
same sources run as plain Python wherever they are not compiled:

- ``COLOCATION_WEBHOOK_COMPILE=0 pip install ...`` builds plain Python on purpose;
- without a C compiler or the Python headers (``python3-dev``) the build says so and is plain Python.

A wheel built as plain Python records why (``webhook/plain-build.txt``), which ``--version`` prints. A compiled
build records the hash of each source it compiled, beside its extensions (``webhook/compiled-sources.<the
extension suffix's tag>.json``). An editable install (``pip install -e .``) compiles into the source tree
(``webhook/**/*.so``): when a compiled module's source no longer has the recorded hash, the tree runs every compiled
module from its source, with one warning line, until the install is run again (webhook/compiled.py).

A build never deletes compiled modules it did not make: a wheel, or a build by another Python or another venv
(plain for want of a compiler), leaves the tree's extensions alone, since the record tells whether they are current.
Only ``COLOCATION_WEBHOOK_COMPILE=0 pip install -e .`` removes this Python's extensions from the tree, as asked.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
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
source_hashes, record_name, write_record = _compiled.source_hashes, _compiled.record_name, _compiled.write_record
GROUP = "webhook_compiled"  # mypyc's group: its shared library is webhook_compiled__mypyc<suffix> beside webhook/
SUFFIX: str = sysconfig.get_config_var("EXT_SUFFIX")  # this Python's: .cpython-311-x86_64-linux-gnu.so
PLAIN_BECAUSE: list[str] = []  # why this build is plain Python, when it is
COMPILED: dict[str, str] = {}  # the hashes of the sources a compiled build compiled (webhook/compiled.py)


def _in_place() -> bool:
    """Whether this build writes into the source tree: ``pip install -e .`` (setuptools' editable_wheel, which builds
    the extensions in place), ``setup.py develop``, ``setup.py build_ext --inplace``."""
    return bool({"editable_wheel", "develop", "--inplace", "-i"} & set(sys.argv[1:]))


def _this_pythons_build() -> list[Path]:
    """The tree's compiled modules for this Python (its extension suffix), their group library and their record;
    those of other Pythons have other suffixes."""
    built = [ROOT / module_path(m) for m in COMPILED_MODULES]
    return [p for p in (*(s.with_name(s.stem + SUFFIX) for s in built), ROOT / f"{GROUP}__mypyc{SUFFIX}",
                        ROOT / "webhook" / record_name(SUFFIX)) if p.is_file()]


# The commands that build. pip runs this file once per step (its requirements, the metadata, then the wheel), and
# mypycify type-checks and translates every module each time it is called (~10 s): only these get the extensions.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def ext_modules() -> list[object]:
    if not BUILDS & set(sys.argv[1:]):
        return []
    asked = os.environ.get(SWITCH, "1") == "0"
    why = f"{SWITCH}=0" if asked else compiler_missing() or ""
    if why:
        print(f"colocation-webhook: {why}: the rules are built as plain Python (correct, about 1.6 times slower)",
              file=sys.stderr)
        PLAIN_BECAUSE.append(why)
        earlier = _this_pythons_build() if _in_place() else []
        if earlier and asked:  # plain Python in place, as asked: the extensions would be imported before the sources
            for built in earlier:
                built.unlink()
            print(f"colocation-webhook: removed this Python's compiled build from the tree ({len(earlier)} files)",
                  file=sys.stderr)
        elif earlier:
            print("colocation-webhook: the compiled modules already in the tree for this Python stay: they run while "
                  f"their sources are the ones webhook/{record_name(SUFFIX)} records", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    if _in_place():  # written again once this build succeeds: a build that fails part way leaves none
        (ROOT / "webhook" / record_name(SUFFIX)).unlink(missing_ok=True)
    before = source_hashes(ROOT, COMPILED_MODULES)
    os.chdir(ROOT)  # mypycify takes paths relative to the project
    extensions = list(mypycify([module_path(m) for m in COMPILED_MODULES], opt_level="3", group_name=GROUP))
    # mypyc has read the sources: record those that did not change meanwhile (one that did runs from its source).
    after = source_hashes(ROOT, COMPILED_MODULES)
    COMPILED.update({path: digest for path, digest in before.items() if after[path] == digest})
    return extensions


class BuildExt(build_ext):
    """Records the hashes of the sources compiled beside the extensions: in the build (so in the wheel) and, when
    building in place, in the tree."""

    def run(self) -> None:
        super().run()
        if COMPILED:
            write_record(Path(self.build_lib) / "webhook", SUFFIX, COMPILED)
            if self.inplace:  # setuptools sets it for build_ext --inplace and for an editable install
                write_record(ROOT / "webhook", SUFFIX, COMPILED)


class BuildPy(build_py):
    """Also writes, into a plain build's package, why it is plain (an editable install's tree has its sources)."""

    def run(self) -> None:
        super().run()
        if PLAIN_BECAUSE and not getattr(self, "editable_mode", False):
            (Path(self.build_lib) / "webhook" / BUILD_NOTE).write_text(PLAIN_BECAUSE[0] + "\n")


setup(ext_modules=ext_modules(), cmdclass={"build_py": BuildPy, "build_ext": BuildExt})
