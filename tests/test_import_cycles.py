"""No import cycle inside webhook/ or bench/: a module never needs, at any depth, a module that needs it back. And
bench/ and tests/ never import each other: what both need is in harness/, which imports neither.

A cycle works only while every import of it stays where it is (inside a function, after a definition): an edit
that moves one breaks the program at start-up with a partially initialised module. Every ``import`` and ``from
... import`` counts, at module level and inside functions alike (a function-level import only defers the cycle);
those under ``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "webhook"
# The folders of code that is run but not shipped, and who may import whom among them.
HARNESS, BENCH, TESTS = "harness", "bench", "tests"
MAY_NOT_IMPORT = {BENCH: {TESTS}, TESTS: {BENCH}, HARNESS: {TESTS, BENCH}}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(*packages: str) -> dict[str, Path]:
    return {_module_name(p): p for package in packages or (PACKAGE,) for p in sorted((ROOT / package).rglob("*.py"))}


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if _type_checking_only(child):
            assert isinstance(child, ast.If)
            for other in child.orelse:  # the else of `if TYPE_CHECKING:` does run
                yield from _import_nodes(other)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _import_nodes(child)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``name`` imports: ``from a.b import c`` is ``a.b.c`` when that is a module,
    else ``a.b``."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: from the package the module is in
                anchor = name.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        out.update(t for t in targets if t in modules and t != name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path that closes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_a_cycle(graph, c) for c in components]


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    todo = [start]
    while todo:  # breadth first: the shortest way back to start
        v = todo.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    raise AssertionError(f"no cycle through {start}")


def import_graph(*packages: str) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` (default: webhook) it imports."""
    modules = _modules(*packages)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_of_webhook_imports_itself_through_others() -> None:
    cycles = _cycles(import_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_bench_script_imports_itself_through_others() -> None:
    cycles = _cycles({m: {t for t in to if t.startswith(BENCH + ".")} for m, to in import_graph(BENCH).items()})
    assert cycles == [], "import cycles in bench/:\n" + "\n".join(" -> ".join(c) for c in cycles)


def forbidden_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for each import of ``graph`` that MAY_NOT_IMPORT forbids."""
    return sorted(f"{m} -> {t}" for m, to in graph.items() for t in to
                  if t.split(".")[0] in MAY_NOT_IMPORT.get(m.split(".")[0], set()))


def test_bench_and_tests_do_not_import_each_other() -> None:
    """A benchmark that imports a test module (or a test that imports a benchmark) ties the two together: what
    both need lives in harness/."""
    graph = import_graph(BENCH, TESTS, HARNESS)
    assert any(t.startswith(HARNESS + ".") for m, to in graph.items() if m.startswith(BENCH + ".") for t in to)
    assert forbidden_imports(graph) == []


def test_the_check_sees_a_cycle() -> None:
    """The walk finds function-level imports and names the cycle; TYPE_CHECKING imports are no edge."""
    assert "webhook.cli.common" in import_graph()["webhook.cli.webhook"]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                     "def f():\n    import y\n")
    assert [a.name for n in _import_nodes(tree) if isinstance(n, ast.Import) for a in n.names] == ["y"]


def test_the_check_sees_bench_and_tests_import_each_other() -> None:
    graph = {"bench.agent": {"harness.apiserver", "tests.mutating"}, "tests.test_x": {"bench.chain", "harness.kernel"},
             "harness.kernel": {"tests.conftest"}, "tests.test_y": {"tests.mutating"}}
    assert forbidden_imports(graph) == ["bench.agent -> tests.mutating", "harness.kernel -> tests.conftest",
                                        "tests.test_x -> bench.chain"]
    # "from harness import x" names the module x of the package
    assert "harness.real_apiserver" in import_graph(TESTS, HARNESS)["tests.e2e.test_real_apiserver"]


# What both programs share (docs/architecture.md, "Who owns what") and what sits above it: the shared kernel and
# the cluster state may need only each other (and the process heap), never a program's code, at any depth.
SHARED = ("webhook.core", "webhook.cluster")
ABOVE = ("webhook.admission", "webhook.agent", "webhook.server", "webhook.policies", "webhook.audit", "webhook.cli",
         "webhook.tls")


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_the_kernel_and_the_state_never_reach_up_through_other_modules() -> None:
    graph = import_graph()
    shared = [m for m in graph if m.startswith(SHARED)]
    assert len(shared) > 20, "the check would pass on nothing"
    upward = {m: sorted(r for r in _reached(graph, m) if r.startswith(ABOVE)) for m in shared}
    assert {m: r for m, r in upward.items() if r} == {}
