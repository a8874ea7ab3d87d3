"""The capability contract: capabilities decide from Readings alone (no edge imported, no collector, no clock),
every capability the cycle runs implements it, every --disable name is answered by one, and each decide works on
Readings built by hand, with no collector and no file at all."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

from webhook.agent.capabilities.batch_resources import BatchResources
from webhook.agent.capabilities.cgroup_plan import CgroupWrites
from webhook.agent.capabilities.contract import AgentCapability, MemoryPressure, Readings
from webhook.agent.capabilities.cpu_eviction import CpuEviction
from webhook.agent.capabilities.memory_eviction import MemoryEviction
from webhook.agent.capabilities.node_condition import NodeCondition
from webhook.agent.coexistence import Coexistence
from webhook.agent.cycle import Agent
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.eviction import EVICT_BY_NODE_MEMORY_USAGE
from webhook.agent.domain.sample import Sample
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.inputs import Inputs, PodView, pod_view
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport

ROOT = Path(__file__).resolve().parents[3]
CAPABILITIES = ROOT / "webhook" / "agent" / "capabilities"
GI = 1 << 30
# What a capability must not touch to measure: the edges, the file system, the clock.
FORBIDDEN_MODULES = ("webhook.agent.edges", "os", "pathlib", "io", "shutil", "socket", "subprocess")
FORBIDDEN_CALLS = {"open", "monotonic", "perf_counter", "time"}


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Modules imported outside ``if TYPE_CHECKING:`` blocks."""
    names: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                continue
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit([n for n in inner if isinstance(n, ast.stmt)])
    visit(tree.body)
    return names


def _decide_calls(tree: ast.Module) -> list[str]:
    """The names called inside every ``decide`` (and the helpers named ``_*`` it may call) of a module."""
    called: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (node.name == "decide" or node.name.startswith("_")
                                                  or node.name in ("pod_memory_needed", "cpusets_needed")):
            if node.name == "_try_evict":      # acting: called from act only
                continue
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    f = call.func
                    called.append(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
    return called


def test_no_capability_imports_an_edge_or_the_file_system() -> None:
    found = {}
    for path in sorted(CAPABILITIES.glob("*.py")):
        bad = [m for m in _runtime_imports(ast.parse(path.read_text()))
               if m.startswith(FORBIDDEN_MODULES) and (m in FORBIDDEN_MODULES or m.startswith("webhook.agent.edges"))]
        if bad:
            found[path.name] = bad
    assert found == {}, f"capabilities import an edge or the file system: {found}"


def test_the_capabilities_load_no_edge_at_all() -> None:
    """Not even through what they import (the inputs, the report, the metrics)."""
    code = ("import sys, pkgutil, importlib, webhook.agent.capabilities as c\n"
            "for m in pkgutil.iter_modules(c.__path__): importlib.import_module(f'{c.__name__}.{m.name}')\n"
            "print(sorted(n for n in sys.modules if n.startswith('webhook.agent.edges')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_no_decide_reads_a_collector_a_file_or_the_clock() -> None:
    found = {}
    for path in sorted(CAPABILITIES.glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = set(_decide_calls(tree)) & (FORBIDDEN_CALLS | {"collect", "node_memory", "pod_memory"})
        named = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(tree)
                 if isinstance(n, ast.Name | ast.Attribute)}
        if calls or any("collector" in name.lower() for name in named):
            found[path.name] = sorted(calls) or ["collector"]
    assert found == {}, f"capabilities that measure: {found}"


def test_every_capability_the_cycle_runs_implements_the_contract() -> None:
    agent = Agent(AgentOptions("n1"), collector=None)  # type: ignore[arg-type]  # no collector: none may be called   # never measures here
    steps: list[AgentCapability[Any]] = [agent.eviction, *agent.order]
    assert [type(s) for s in steps] == [MemoryEviction, CgroupWrites, CpuEviction, BatchResources, NodeCondition]
    for step in steps:
        assert isinstance(step.names, tuple) and all(isinstance(n, Capability) for n in step.names)
        for method in ("decide", "act"):
            params = list(inspect.signature(getattr(step, method)).parameters)
            assert params == (["readings"] if method == "decide" else ["readings", "decision", "report"]), \
                (type(step).__name__, method, params)


def test_every_disable_name_is_answered_by_one_capability() -> None:
    agent = Agent(AgentOptions("n1"), collector=None)  # type: ignore[arg-type]  # no collector: none may be called
    names = [n for step in (agent.eviction, *agent.order) for n in step.names]
    assert sorted(names) == sorted(Capability) and len(names) == len(set(names))


# -- decide from hand-made Readings: no collector, no file -----------------------------------------------------
def _be(uid: str, priority: int) -> PodView:
    return pod_view({"metadata": {"uid": uid, "name": uid, "namespace": "ns",
                                  "labels": {"koordinator.sh/qosClass": "BE"}},
                     "spec": {"priority": priority, "containers": [{"name": "c"}]}})


def _inputs(pods: list[PodView], watermark: int = 70) -> Inputs:
    return Inputs(None, pods, True, Colocation(), MemoryEvict(enable=True, memoryEvictThresholdPercent=watermark,
                                                            memoryEvictLowerPercent=watermark - 5), CPUSuppress())


def _eviction() -> MemoryEviction:
    metrics = AgentMetrics()
    return MemoryEviction(AgentOptions("n1"), Coexistence(frozenset(), metrics), None, metrics)


def test_memory_eviction_below_the_watermark_needs_no_pod_memory_and_evicts_nobody() -> None:
    readings = Readings(0.0, _inputs([_be("a", 1), _be("b", 2)]), (10 * GI, 5 * GI))   # 50 % used
    eviction = _eviction()
    assert not eviction.pod_memory_needed(readings)
    decision = eviction.decide(readings)
    assert decision.tasks == [] and not decision.pressure


def test_memory_eviction_over_the_watermark_ranks_the_measured_be_pods() -> None:
    pods = [_be("low", 1), _be("high", 9), _be("big", 1)]
    readings = Readings(0.0, _inputs(pods), (10 * GI, 2 * GI))   # 80 % used: 1.5 GiB over the 65 % lower mark
    eviction = _eviction()
    assert eviction.pod_memory_needed(readings)
    measured = Readings(0.0, readings.inputs, readings.memory, be_memory={"low": GI, "high": 3 * GI, "big": 2 * GI})
    decision = eviction.decide(measured)
    assert decision.pressure and decision.release_target == int(1.5 * GI)
    report = CycleReport("n1")
    eviction.act(measured, decision, report)      # ``once``: no API, the victims planned
    # The lowest priority first, the bigger user first among equals, until 1.5 GiB is covered.
    assert [(e.name, e.reason) for e in report.evictions] == [("big", EVICT_BY_NODE_MEMORY_USAGE)]
    assert decision.pressure_fact == MemoryPressure(True, tuple(decision.first_observed))


def test_memory_eviction_without_node_memory_decides_nothing() -> None:
    eviction = _eviction()
    readings = Readings(0.0, _inputs([_be("a", 1)]), None)
    assert not eviction.pod_memory_needed(readings)
    decision = eviction.decide(readings)
    report = CycleReport("n1")
    eviction.act(readings, decision, report)
    assert decision.memory is None and report.memory is None and report.evictions == []


def test_node_condition_reads_the_pressure_handed_to_it() -> None:
    metrics = AgentMetrics()
    condition = NodeCondition(AgentOptions("n1"), Coexistence(frozenset(), metrics), None, metrics)
    inputs = _inputs([])
    assert condition.decide(Readings(0.0, inputs, None)).status == "False"
    met = condition.decide(Readings(0.0, inputs, None, memory_pressure=MemoryPressure(True, ("memory usage >= 70%",))))
    assert (met.status, met.message) == ("True", "memory threshold met: memory usage >= 70%")


def test_batch_resources_from_a_hand_made_sample() -> None:
    metrics = AgentMetrics()
    batch = BatchResources(AgentOptions("n1"), Coexistence(frozenset(), metrics), None, metrics)
    inputs = Inputs(None, [], True, Colocation(enable=True), MemoryEvict(), CPUSuppress())
    sample = Sample(0.0, 8 * GI, 6 * GI, 4, 1000.0)
    decision = batch.decide(Readings(0.0, inputs, (8 * GI, 6 * GI), sample=sample))
    # No node object: the machine is the node (4 cores, 8 GiB); 65 % of the CPU less the 1 core used.
    assert decision.values["kubernetes.io/batch-cpu"] == 4000 * 65 // 100 - 1000
