"""The build compiles the core and the rules with mypyc (setup.py): the compiled modules answer as the plain sources
do, a source tree edited after its build runs every compiled module from its source (one warning line), and
``--version`` says which way the rules run and why.

The compiled build is the one wheel the run builds (tests/builds.py), shared with the Dockerfile's test."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.builds import BUILD_TIMEOUT, copy_context, env
from webhook.compiled import (
    BUILD_NOTE,
    COMPILED_MODULES,
    compiler_missing,
    is_compiled,
    module_path,
    read_record,
    record_name,
    source_hash,
    source_hashes,
    stale_modules,
    unrecorded_build,
    write_record,
)

ROOT = Path(__file__).resolve().parents[1]
REVIEWS = sorted([*(ROOT / "tests" / "fixtures" / "admission").glob("v1*.json"),
                  ROOT / "examples" / "admissionreview-koord-batch.json"])
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

# Every recorded review through both chains on the example state; the whole decision as JSON.
ANSWERS = r"""
import json, sys
from pathlib import Path
import webhook.compiled as c
from webhook.admission import chain
from webhook.admission.context import Settings
from webhook.admission.review import review_from_dict
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

state = ClusterState(WEBHOOK_KINDS)
FilesSource(example_folder(), state).load()
out = {"compiled": [m for m in c.COMPILED_MODULES if c.is_compiled(m)]}
for path in sys.argv[1:]:
    data = json.loads(Path(path).read_text())
    if data.get("kind") != "AdmissionReview":
        continue
    request = review_from_dict(data).request
    for name, run in (("mutate", chain.mutate), ("validate", chain.validate)):
        d = run(request, state, Settings())
        out[f"{Path(path).name} {name}"] = [d.allowed, d.code, d.reason, d.message, d.patch, d.warnings,
                                            d.audit_annotations, d.rule, d.rule_failed, d.patch_rules]
print(json.dumps(out, sort_keys=True))
"""


def _answers(tree: Path) -> dict[str, object]:
    run = subprocess.run([sys.executable, "-c", ANSWERS, *map(str, REVIEWS)], cwd=tree,
                         env={**env(), "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    answers: dict[str, object] = json.loads(run.stdout)
    return answers


def _compiled(tree: Path) -> Path:
    if compiler_missing() is not None:
        pytest.skip(f"this machine builds plain Python ({compiler_missing()}): there is one build to compare")
    return tree


def _cli(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli.webhook", *args], cwd=tree,
                          env={**env(), "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)  # the first test to ask for the build waits for it
def test_compiled_and_plain_builds_answer_every_recorded_review_alike(compiled_tree: Path, tmp_path: Path) -> None:
    # The plain build: the same sources without the extensions beside them (Python would import those first).
    plain, built = _answers(copy_context(tmp_path)), _answers(_compiled(compiled_tree))
    assert plain.pop("compiled") == []
    assert built.pop("compiled") == list(COMPILED_MODULES), "every module the build compiles runs compiled"
    assert len(plain) >= 2 * 20, "the recorded reviews were found"
    assert built == plain


def test_compiled_modules_are_the_pure_core() -> None:
    assert "webhook.admission.chain" in COMPILED_MODULES and "webhook.core.quantity" in COMPILED_MODULES
    # The edges stay plain Python: I/O, the server, the agent, the sources; of the cluster state, only its pure
    # judgements are compiled.
    edges = ("webhook.agent", "webhook.cli", "webhook.cluster", "webhook.server")
    assert [m for m in COMPILED_MODULES if m.startswith(edges)] == ["webhook.cluster.profiles", "webhook.cluster.validation"]
    assert all((ROOT / module_path(m)).is_file() for m in COMPILED_MODULES)
    assert is_compiled("webhook.compiled") is False


# An edit whose effect shows in `review`: the example pod's cpu request (0.5) becomes batch-cpu "500" through
# batch_resources (compiled), which calls quantity.milli_value (compiled, the same group) natively.
EDIT = ("    return int(q.scaleb(3, _EXACT).to_integral_value(rounding=decimal.ROUND_CEILING))\n",
        "    return int(q.scaleb(3, _EXACT).to_integral_value(rounding=decimal.ROUND_CEILING)) + 7\n")
POD = ROOT / "examples" / "pod-koord-batch.yaml"


def _edited(compiled_tree: Path, tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(compiled_tree, tree, symlinks=True)
    source = tree / "webhook" / "core" / "quantity.py"
    text = source.read_text()
    assert EDIT[0] in text, "the edit still applies to quantity.py"
    source.write_text(text.replace(EDIT[0], EDIT[1]))
    return tree


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)
def test_a_compiled_tree_runs_compiled_and_says_so(compiled_tree: Path) -> None:
    run = _cli(_compiled(compiled_tree), "--version")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.splitlines()[1] == "rules: compiled with mypyc"
    review = _cli(compiled_tree, "review", str(POD), "-o", "patch")
    assert review.returncode == 0 and '"kubernetes.io/batch-cpu": "500"' in review.stdout, review.stderr
    # The build recorded the hash of every source it compiled, beside its extensions (setup.py).
    record = read_record(compiled_tree / "webhook", SUFFIX)
    assert record == {module_path(m): source_hash(compiled_tree / module_path(m)) for m in COMPILED_MODULES}


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=tree, check=True,
                   capture_output=True, timeout=60)


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)
def test_touch_and_git_checkout_keep_the_compiled_build(compiled_tree: Path, tmp_path: Path) -> None:
    """What moves a source's time and not its code leaves the tree compiled: ``touch`` of every compiled module's
    source, and ``git checkout`` of one edited and given back."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tree = tmp_path / "tree"
    shutil.copytree(_compiled(compiled_tree), tree, symlinks=True)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "built")
    later = time.time() + 3600
    for module in COMPILED_MODULES:
        os.utime(tree / module_path(module), (later, later))  # touch, an hour ahead of the build
    source = tree / "webhook" / "core" / "quantity.py"
    source.write_text(source.read_text().replace(EDIT[0], EDIT[1]))
    assert stale_modules(tree / "webhook") == ["webhook/core/quantity.py"]
    _git(tree, "checkout", "--", "webhook/core/quantity.py")  # the edit given back: a new file time, the old code
    assert stale_modules(tree / "webhook") == []
    run = _cli(tree, "--version")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.splitlines()[1] == "rules: compiled with mypyc"


def _setup(tree: Path, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "setup.py", "-q", *args], cwd=tree, env={**env(), **environ},
                          capture_output=True, text=True, timeout=120)


def _built(tree: Path) -> list[str]:
    """The tree's compiled build: extensions (any Python's) and records."""
    return sorted(str(p.relative_to(tree)) for p in [*tree.rglob("*.so"), *tree.rglob("compiled-sources.*.json")])


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)
def test_a_build_for_another_environment_keeps_the_trees_compiled_modules(compiled_tree: Path,
                                                                          tmp_path: Path) -> None:
    """A wheel built from the tree, and a build in place without a compiler (another venv, another Python), leave
    the tree's compiled modules as they are: their record says whether they are current. Only a build in place
    that asks for plain Python removes this Python's, and no other Python's."""
    tree = tmp_path / "tree"
    shutil.copytree(_compiled(compiled_tree), tree, symlinks=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    other = ".cpython-399-x86_64-linux-gnu.so"  # another Python's build, beside this one's
    (tree / "webhook" / "core" / f"quantity{other}").write_bytes(b"")
    (tree / f"webhook_compiled__mypyc{other}").write_bytes(b"")
    write_record(tree / "webhook", other, {})
    before = _built(tree)
    assert {f"webhook/core/quantity{SUFFIX}", f"webhook_compiled__mypyc{SUFFIX}"} <= set(before), before

    wheel = _setup(tree, "build", "--build-base", str(tmp_path / "build"), CC="/nonexistent/cc")
    assert wheel.returncode == 0, wheel.stderr
    assert "built as plain Python" in wheel.stderr
    assert _built(tree) == before, "a plain wheel built from the tree leaves the tree's build"

    elsewhere = _setup(tree, "build_ext", "--inplace", CC="/nonexistent/cc")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert (f"the compiled modules already in the tree for this Python stay: they run while their sources are the "
            f"ones webhook/{record_name(SUFFIX)} records") in elsewhere.stderr
    assert _built(tree) == before, "a build in place without a compiler leaves the tree's build"
    assert _cli(tree, "--version").stdout.splitlines()[1] == "rules: compiled with mypyc"

    plain = _setup(tree, "build_ext", "--inplace", COLOCATION_WEBHOOK_COMPILE="0")
    assert plain.returncode == 0, plain.stderr
    assert (f"removed this Python's compiled build from the tree ({len(COMPILED_MODULES) + 2} files)"
            in plain.stderr)
    assert _built(tree) == sorted(["webhook/core/quantity" + other, "webhook_compiled__mypyc" + other,
                                   "webhook/" + record_name(other)]), "another Python's build stays"
    assert _cli(tree, "--version").stdout.splitlines()[1].startswith("rules: plain Python (this source tree holds "
                                                                      "no compiled build")


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)
def test_an_edit_to_a_compiled_tree_runs_from_the_sources_with_one_warning(compiled_tree: Path,
                                                                           tmp_path: Path) -> None:
    tree = _edited(_compiled(compiled_tree), tmp_path)
    warning = ("colocation-webhook: webhook/core/quantity.py changed after the compiled build: the rules run as "
               "plain Python (about 1.6 times slower) until `pip install -e .` compiles them again\n")
    review = _cli(tree, "review", str(POD), "-o", "patch")
    assert review.returncode == 0, review.stderr
    assert review.stderr.startswith(warning) and review.stderr.count("colocation-webhook:") == 1, review.stderr
    assert '"kubernetes.io/batch-cpu": "507"' in review.stdout, "the edit takes effect, through the compiled callers"
    version = _cli(tree, "--version")
    assert version.stdout.splitlines()[1] == ("rules: plain Python (webhook/core/quantity.py changed after the "
                                              "compiled build; `pip install -e .` compiles it again)")


# Why every compiled module is bypassed, not the stale one alone: the one from its source, its compiled callers
# still run the build's code.
ONE_FROM_SOURCE = r"""
import importlib.machinery, importlib.util, sys
import webhook
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "SourceFinder"]
class One:
    def find_spec(self, name, path=None, target=None):
        if name == "webhook.core.quantity":
            source = sys.argv[1]
            return importlib.util.spec_from_file_location(name, source,
                                                          loader=importlib.machinery.SourceFileLoader(name, source))
sys.meta_path.insert(0, One())
from decimal import Decimal
from webhook.core.quantity import milli_value
from webhook.admission.domain.batch_resources import milli_cores_text
print(milli_value(Decimal("0.5")), milli_cores_text("0.5"))
"""


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)
def test_one_module_from_its_source_is_not_enough(compiled_tree: Path, tmp_path: Path) -> None:
    tree = _edited(_compiled(compiled_tree), tmp_path)
    run = subprocess.run([sys.executable, "-c", ONE_FROM_SOURCE, str(tree / "webhook/core/quantity.py")], cwd=tree,
                         env={**env(), "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["507", "500"], "the module from its source is edited, its compiled caller is not"


BUILT = "EDITED = False\n"  # the source as the build compiled it, in the trees below


def _tree(tmp_path: Path, source_tree: bool) -> Path:
    """A package holding one (empty) compiled module, the record of the source its build compiled, and that source
    edited since."""
    pkg = tmp_path / "webhook"
    (pkg / "core").mkdir(parents=True)
    for name in ("__init__.py", "compiled.py"):
        shutil.copy(ROOT / "webhook" / name, pkg / name)
    (pkg / "core" / "__init__.py").write_text("")
    source, built = pkg / "core" / "quantity.py", pkg / "core" / f"quantity{SUFFIX}"
    built.write_bytes(b"")
    source.write_text(BUILT)
    write_record(pkg, SUFFIX, source_hashes(tmp_path, ["webhook.core.quantity"]))
    source.write_text("EDITED = True\n")
    if source_tree:
        (tmp_path / "setup.py").write_text("")
    return pkg


def test_a_source_tree_built_before_an_edit_is_stale(tmp_path: Path) -> None:
    pkg = _tree(tmp_path, source_tree=True)
    assert stale_modules(pkg) == ["webhook/core/quantity.py"]
    (pkg / "core" / "quantity.py").write_text(BUILT)  # the edit undone: the source is the one compiled again
    assert stale_modules(pkg) == []


def test_file_times_do_not_make_a_source_stale(tmp_path: Path) -> None:
    """``touch``, ``git checkout`` or a copy move a source's time, not its code: the build is current while the
    content is the one it compiled, whatever the times say."""
    pkg = _tree(tmp_path, source_tree=True)
    source, built = pkg / "core" / "quantity.py", pkg / "core" / f"quantity{SUFFIX}"
    source.write_text(BUILT)
    os.utime(built, (1_000_000, 1_000_000))  # the extension far older than its source
    assert stale_modules(pkg) == []
    source.write_text("EDITED = True\n")
    os.utime(source, (1_000, 1_000))  # an edited source far older than the extension
    assert stale_modules(pkg) == ["webhook/core/quantity.py"]


def test_a_build_without_a_record_is_stale_and_says_so(tmp_path: Path) -> None:
    """Compiled modules whose build recorded nothing (an older setup.py, a build that failed part way) cannot be
    vouched for: they run from their sources, and the warning says why, not that a file changed."""
    pkg = _tree(tmp_path, source_tree=True)
    (pkg / record_name(SUFFIX)).unlink()
    (pkg / "core" / "quantity.py").write_text(BUILT)
    assert stale_modules(pkg) == ["webhook/core/quantity.py"]
    assert unrecorded_build(pkg) == f"webhook/{record_name(SUFFIX)}"
    run = subprocess.run([sys.executable, "-c", "import webhook, webhook.core.quantity as q; print(q.EDITED)"],
                         cwd=tmp_path, env={**env(), "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and run.stdout == "False\n", run.stderr
    assert run.stderr == (f"colocation-webhook: the compiled build has no record of the sources it compiled "
                          f"(webhook/{record_name(SUFFIX)}): the rules run as plain Python (about 1.6 times slower) "
                          "until `pip install -e .` compiles them again\n")


def test_each_pythons_build_has_its_own_record(tmp_path: Path) -> None:
    """Another Python's build in the same tree (another extension suffix) records its sources apart: it neither
    vouches for this Python's extensions nor overwrites their record."""
    pkg = _tree(tmp_path, source_tree=True)
    other = ".cpython-399-x86_64-linux-gnu.so"
    assert record_name(SUFFIX) != record_name(other)
    write_record(pkg, other, source_hashes(tmp_path, ["webhook.core.quantity"]))  # built from the edited source
    assert stale_modules(pkg) == ["webhook/core/quantity.py"], "this Python's extension is still the old build"
    assert read_record(pkg, other) == {"webhook/core/quantity.py": source_hash(pkg / "core" / "quantity.py")}


def test_an_installed_package_is_never_stale(tmp_path: Path) -> None:
    # An installed package is the wheel it came from: no setup.py beside the package, no check.
    assert stale_modules(_tree(tmp_path, source_tree=False)) == []


def test_a_stale_tree_imports_the_sources_and_warns_once(tmp_path: Path) -> None:
    # The extension here is an empty file: importing it would fail, so this passes only from the source.
    _tree(tmp_path, source_tree=True)
    run = subprocess.run([sys.executable, "-c", "import webhook, webhook.core.quantity as q; print(q.EDITED)"],
                         cwd=tmp_path, env={**env(), "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "True\n"
    assert run.stderr == ("colocation-webhook: webhook/core/quantity.py changed after the compiled build: the rules "
                          "run as plain Python (about 1.6 times slower) until `pip install -e .` compiles them "
                          "again\n")


def test_a_plain_build_says_why_in_version(tmp_path: Path) -> None:
    """Without a C compiler the build is plain Python: it says so, and the build's ``--version`` says why."""
    context = copy_context(tmp_path / "src")
    build = subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", str(tmp_path / "build")],
                           cwd=context, env={**env(), "CC": "/nonexistent/cc"}, capture_output=True, text=True,
                           timeout=120)
    assert build.returncode == 0, build.stderr
    assert ("colocation-webhook: no C compiler (/nonexistent/cc): the rules are built as plain Python"
            in build.stderr)
    lib = tmp_path / "build" / "lib"
    assert (lib / "webhook" / BUILD_NOTE).read_text() == "no C compiler (/nonexistent/cc)\n"
    run = _cli(lib, "--version")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1] == "rules: plain Python (built with no C compiler (/nonexistent/cc))"
