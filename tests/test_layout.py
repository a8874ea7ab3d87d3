"""Tests mirror the code, both ways: the tests of ``webhook/<package>/<module>.py`` are
``tests/<package>/test_<module>.py`` (or ``test_<module>_<aspect>.py``), so a module's tests are found from its path,
and a module with no test file of its own is named below with where it is tested (docs/architecture.md, "Where the
tests are"). Whole programs are tested in folders of their own, and what checks the repository as a whole stays
at the top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# Whole programs as a user or the apiserver meets them: no one module to mirror.
PROGRAM_FOLDERS = {"cli", "e2e", "deploy"}
# The repository as a whole (the tests of a module at the package's top, webhook/compiled.py, webhook/heap.py,
# mirror it as the others do).
TOP = {"test_architecture_doc.py", "test_bench_scripts.py", "test_cel_check.py", "test_citations.py",
       "test_import_cycles.py", "test_layout.py", "test_lint.py", "test_lock.py", "test_readme.py", "test_version.py"}
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
            if test.name not in TOP and not _mirrors(test):
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


# The other way: every module of webhook/ has a test file of its own, or is tested through these (each reaches the
# module through its imports). The rules' domain modules are tested through their rule's table (tests/admission/
# rules/<chain>/test_<name>.py, docs/architecture.md) and the console scripts' modules as programs, in tests/cli/.
TESTED_THROUGH: dict[str, tuple[str, ...]] = {
    "webhook/admission/context.py": ("tests/admission/rules/test_contract.py", "tests/admission/test_chain_rule_errors.py"),
    "webhook/admission/response.py": ("tests/admission/test_chain_rule_errors.py", "tests/admission/test_chain_rule_times.py"),
    "webhook/admission/domain/patch.py": ("tests/admission/test_chain_copy_on_write.py",
                                          "tests/admission/test_chain_mutating_recorded.py"),
    "webhook/admission/domain/quota.py": ("tests/admission/rules/validating/test_quota_presence.py",
                                          "tests/admission/rules/validating/test_quota_constraints.py"),
    "webhook/agent/capabilities/cgroup_limits.py": ("tests/agent/edges/test_cgroups.py", "tests/agent/test_cycle.py"),
    "webhook/agent/capabilities/cgroup_plan.py": ("tests/agent/edges/test_cgroups.py", "tests/agent/test_cycle.py"),
    "webhook/agent/capabilities/shared.py": ("tests/agent/capabilities/test_contract.py",),
    "webhook/agent/domain/coexistence.py": ("tests/agent/test_coexistence.py",),
    "webhook/agent/domain/durations.py": ("tests/agent/domain/test_thresholds.py",),
    "webhook/agent/domain/event_series.py": ("tests/agent/edges/test_actions.py",),
    "webhook/agent/domain/memory_notify.py": ("tests/agent/edges/test_notify.py",),
    "webhook/agent/domain/sample.py": ("tests/agent/edges/test_collectors.py",),
    "webhook/agent/domain/priority_eviction.py": ("tests/agent/domain/test_cpu_eviction.py",
                                                  "tests/agent/domain/test_memory_eviction.py"),
    "webhook/agent/edges/metrics_server.py": ("tests/deploy/test_monitoring.py",),
    "webhook/agent/loop.py": ("tests/e2e/test_agent_kernel.py",),
    "webhook/agent/metrics.py": ("tests/deploy/test_monitoring.py", "tests/agent/edges/test_notify.py"),
    "webhook/agent/options.py": ("tests/agent/test_cycle.py", "tests/agent/test_inputs.py"),
    "webhook/audit/files.py": ("tests/cli/test_audit_input.py",),
    "webhook/audit/findings.py": ("tests/cli/test_audit.py",),
    "webhook/audit/migrate.py": ("tests/cli/test_audit.py",),
    "webhook/audit/subjects.py": ("tests/cli/test_audit.py",),
    "webhook/cluster/cache_metrics.py": ("tests/cluster/test_live_staleness.py",),
    "webhook/cluster/sources.py": ("tests/cli/test_serve.py",),
    "webhook/core/fielderrors.py": ("tests/cluster/test_validation.py", "tests/policies/test_invariants.py"),
    "webhook/core/priority.py": ("tests/admission/rules/mutating/test_priority.py",),
    "webhook/core/qos.py": ("tests/admission/rules/mutating/test_colocation_profile.py",
                            "tests/admission/rules/validating/test_koordinator_rules.py"),
    "webhook/core/resources.py": ("tests/admission/test_chain_pod_api.py", "tests/agent/domain/test_batch_allocatable.py"),
    "webhook/server/app.py": ("tests/server/test_asgi_entry.py", "tests/e2e/test_openapi_schemathesis.py"),
    "webhook/server/offload.py": ("tests/server/test_serving_limits.py", "tests/server/test_memory_budget.py"),
    "webhook/server/service.py": ("tests/server/test_serving_limits.py", "tests/server/test_serving_inline.py"),
    "webhook/tls/pair.py": ("tests/tls/test_certs.py",),
    "webhook/tls/watch.py": ("tests/tls/test_certs.py", "tests/server/test_serving_uvicorn.py"),
}


def _own_tests(module: Path) -> list[Path]:
    rel = module.relative_to(ROOT / "webhook")
    return [t for t in (TESTS / rel.parent).glob("test_*.py")
            if t.stem.removeprefix("test_") == module.stem or t.stem.removeprefix("test_").startswith(module.stem + "_")]


def _through_convention(module: Path) -> list[Path]:
    rel = module.relative_to(ROOT).as_posix()
    if rel.startswith("webhook/admission/domain/"):
        return sorted((TESTS / "admission" / "rules").glob(f"*/test_{module.stem}.py"))
    if rel.startswith("webhook/cli/"):
        return sorted((TESTS / "cli").glob("test_*.py"))
    return []


def _modules() -> list[Path]:
    return sorted(m for m in (ROOT / "webhook").rglob("*.py") if m.stem != "__init__")


def test_every_module_has_its_tests_or_says_where_they_are() -> None:
    untested = [m.relative_to(ROOT).as_posix() for m in _modules()
                if not _own_tests(m) and not _through_convention(m) and m.relative_to(ROOT).as_posix() not in TESTED_THROUGH]
    assert untested == [], (f"modules with no tests/<package>/test_<module>.py: write one, or name in "
                            f"tests/test_layout.py TESTED_THROUGH where they are tested: {untested}")
    stale = sorted(m for m in TESTED_THROUGH if not (ROOT / m).is_file() or _own_tests(ROOT / m))
    assert stale == [], f"TESTED_THROUGH names modules that are gone or have test files of their own now: {stale}"


def test_what_tested_through_names_reaches_its_module() -> None:
    from tests.test_import_cycles import import_graph

    graph = import_graph()

    def reached(test: Path) -> set[str]:
        todo = [n.module for n in ast.walk(ast.parse(test.read_text())) if isinstance(n, ast.ImportFrom) and n.module]
        todo += [f"{n.module}.{a.name}" for n in ast.walk(ast.parse(test.read_text()))
                 if isinstance(n, ast.ImportFrom) and n.module for a in n.names]
        todo += [a.name for n in ast.walk(ast.parse(test.read_text())) if isinstance(n, ast.Import) for a in n.names]
        seen: set[str] = set()
        while todo:
            m = todo.pop()
            if m in graph and m not in seen:
                seen.add(m)
                todo.extend(graph[m])
            elif m.startswith("tests.") and m not in seen:   # a shared helper of the tests (tests.mutating)
                seen.add(m)
                helper = ROOT / (m.replace(".", "/") + ".py")
                if helper.is_file():
                    todo.extend(reached(helper))
        return seen

    wrong = []
    for module, tests in TESTED_THROUGH.items():
        name = module.removesuffix(".py").replace("/", ".")
        for test in tests:
            if not (ROOT / test).is_file() or name not in reached(ROOT / test):
                wrong.append(f"{test} does not reach {module}")
    assert wrong == []
