"""The build compiles the core and the rules with mypyc (setup.py): the compiled modules answer as the plain sources
do, and a source tree whose compiled modules are older than their sources refuses to run them."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.compiled import COMPILED_MODULES, is_compiled, module_path, stale_modules

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


def _answers(pythonpath: Path | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    run = subprocess.run([sys.executable, "-c", ANSWERS, *map(str, REVIEWS)], cwd=pythonpath or ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    answers: dict[str, object] = json.loads(run.stdout)
    return answers


def test_compiled_and_plain_builds_answer_every_recorded_review_alike(tmp_path: Path) -> None:
    # The plain build: the same sources without the extensions beside them (Python would import those first).
    shutil.copytree(ROOT / "webhook", tmp_path / "webhook", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    plain, built = _answers(tmp_path), _answers(None)
    assert plain.pop("compiled") == []
    compiled = built.pop("compiled")
    if not compiled:
        pytest.skip("this environment was installed without compiling (COLOCATION_WEBHOOK_COMPILE=0, or no "
                    "compiler): there is one build to compare")
    assert compiled == list(COMPILED_MODULES), "every module the build compiles runs compiled"
    assert len(plain) >= 2 * 20, "the recorded reviews were found"
    assert built == plain


def test_compiled_modules_are_the_pure_core() -> None:
    assert "webhook.admission.chain" in COMPILED_MODULES and "webhook.core.quantity" in COMPILED_MODULES
    # The edges stay plain Python: I/O, the server, the agent.
    assert not [m for m in COMPILED_MODULES if m.startswith(("webhook.agent", "webhook.cli", "webhook.cluster"))]
    assert all((ROOT / module_path(m)).is_file() for m in COMPILED_MODULES)
    assert is_compiled("webhook.compiled") is False


def _tree(tmp_path: Path, source_tree: bool) -> Path:
    """A package holding one compiled module and its source, the source edited after the build."""
    pkg = tmp_path / "webhook"
    (pkg / "core").mkdir(parents=True)
    for name in ("__init__.py", "compiled.py"):
        shutil.copy(ROOT / "webhook" / name, pkg / name)
    (pkg / "core" / "__init__.py").write_text("")
    source, built = pkg / "core" / "quantity.py", pkg / "core" / f"quantity{SUFFIX}"
    built.write_bytes(b"")
    source.write_text("# edited after the build\n")
    os.utime(built, (1_000_000, 1_000_000))
    if source_tree:
        (tmp_path / "setup.py").write_text("")
    return pkg


def test_a_source_tree_built_before_an_edit_is_stale(tmp_path: Path) -> None:
    pkg = _tree(tmp_path, source_tree=True)
    assert stale_modules(pkg) == ["webhook/core/quantity.py"]
    os.utime(pkg / "core" / f"quantity{SUFFIX}")  # rebuilt: newer than its source
    assert stale_modules(pkg) == []


def test_an_installed_package_is_never_stale(tmp_path: Path) -> None:
    # An installer writes a wheel's files in any order: no setup.py beside the package, no check.
    assert stale_modules(_tree(tmp_path, source_tree=False)) == []


def test_importing_a_stale_tree_names_the_module_and_the_fix(tmp_path: Path) -> None:
    _tree(tmp_path, source_tree=True)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", "import webhook"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1
    assert ("ImportError: colocation-webhook: the compiled build of webhook/core/quantity.py is older than the "
            "source; rebuild it with `pip install -e .`") in run.stderr
    assert "COLOCATION_WEBHOOK_COMPILE=0 pip install -e ." in run.stderr
