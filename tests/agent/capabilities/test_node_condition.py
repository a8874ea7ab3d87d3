"""BEMemoryPressure: the condition for the pressure seen, and a node status change only when its status, reason
or message changes, with lastTransitionTime moved only by a new status."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from webhook.agent.capabilities.contract import MemoryPressure, Readings
from webhook.agent.capabilities.node_condition import (
    EVICTION_DISABLED_REASON,
    NO_PRESSURE_REASON,
    PRESSURE_CONDITION,
    PRESSURE_REASON,
    NodeCondition,
)
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.slo_config import Colocation, CPUSuppress, MemoryEvict
from webhook.agent.edges.actions import KubeActions
from webhook.agent.inputs import Inputs
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import CycleReport


def _condition(dry_run: bool = True, disabled: frozenset[Capability] = frozenset()) -> NodeCondition:
    metrics = AgentMetrics()
    return NodeCondition(AgentOptions("n1", dry_run=dry_run, transition_period=300.0, disabled=disabled),
                         Coexistence(disabled, metrics), None, metrics)


def _node(status: str | None = None) -> dict[str, Any]:
    """A node with no BEMemoryPressure, or one as the agent sets it for no pressure (``status`` False)."""
    conditions = [] if status is None else [{"type": PRESSURE_CONDITION, "status": status,
                                             "reason": NO_PRESSURE_REASON, "message": "no memory threshold met"}]
    return {"metadata": {"name": "n1"}, "status": {"conditions": conditions}}


def _pressure(met: bool, observed: list[str]) -> Readings:
    """What the cycle hands the condition: memory eviction's conclusion."""
    return Readings(0.0, _on(None).inputs, None, memory_pressure=MemoryPressure(met, tuple(observed)))


def _on(node: dict[str, Any] | None) -> Readings:
    return Readings(0.0, Inputs(node, [], False, Colocation(), MemoryEvict(), CPUSuppress()), None)


def test_pressure_names_the_thresholds_met() -> None:
    condition = _condition()
    cond = condition.decide(_pressure(True, ["memory.available<30%"]))
    assert (cond.type, cond.status, cond.reason, cond.message) == (
        PRESSURE_CONDITION, "True", PRESSURE_REASON, "memory threshold met: memory.available<30%")
    assert condition.metrics.registry.get_sample_value("colocation_agent_be_memory_pressure", {"node": "n1"}) == 1


def test_pressure_held_by_the_transition_period_says_so() -> None:
    assert _condition().decide(_pressure(True, [])).message == "memory threshold met within the last 300s transition period"


def test_no_pressure() -> None:
    cond = _condition().decide(_pressure(False, []))
    assert (cond.status, cond.reason) == ("False", NO_PRESSURE_REASON)


def test_both_eviction_capabilities_off_is_unknown() -> None:
    cond = _condition(disabled=frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION})).decide(_pressure(True, []))
    assert (cond.status, cond.reason) == ("Unknown", EVICTION_DISABLED_REASON)
    cond = _condition(disabled=frozenset({Capability.MEMORY_EVICTION})).decide(_pressure(True, []))
    assert cond.status == "True"


def test_the_status_is_changed_only_when_it_differs(caplog: pytest.LogCaptureFixture) -> None:
    condition = _condition()
    with caplog.at_level(logging.INFO, "colocation-agent"):
        condition.act(_on(_node("False")), condition.decide(_pressure(False, [])), CycleReport("n1"))     # as on the node: nothing
        condition.act(_on(_node("False")), condition.decide(_pressure(True, [])), CycleReport("n1"))      # changed
        condition.act(_on(_node("False")), condition.decide(_pressure(True, [])), CycleReport("n1"))      # as last set: nothing
    said = [r.getMessage() for r in caplog.records if "node condition" in r.getMessage()]
    assert said == ["dry-run: would set node condition BEMemoryPressure=True (memory threshold met within the "
                    "last 300s transition period)"]
    assert condition.last_status == "True"


def test_unknown_is_not_added_to_a_node_without_the_condition(caplog: pytest.LogCaptureFixture) -> None:
    condition = _condition(disabled=frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION}))
    with caplog.at_level(logging.INFO, "colocation-agent"):
        condition.act(_on(_node()), condition.decide(_pressure(False, [])), CycleReport("n1"))
        assert condition.last_status is None
        condition.act(_on(_node("False")), condition.decide(_pressure(False, [])), CycleReport("n1"))   # one an earlier run left: Unknown now
    assert condition.last_status == "Unknown"
    assert len([r for r in caplog.records if "node condition" in r.getMessage()]) == 1


def test_without_an_api_or_a_dry_run_nothing_is_changed() -> None:
    condition = _condition(dry_run=False)
    condition.act(_on(_node("False")), condition.decide(_pressure(True, [])), CycleReport("n1"))
    assert condition.last_status is None


class _Patches:
    """The node status patches the agent makes (KubeActions.patch_node_status), all accepted."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def patch_node_status(self, body: dict[str, Any]) -> bool:
        self.bodies.append(body)
        return True

    def conditions(self) -> list[dict[str, str]]:
        return [b["status"]["conditions"][0] for b in self.bodies]


def _patching() -> tuple[NodeCondition, _Patches]:
    metrics, patches = AgentMetrics(), _Patches()
    options = AgentOptions("n1", transition_period=300.0)
    return NodeCondition(options, Coexistence(frozenset(), metrics), cast(KubeActions, patches), metrics), patches


SINCE = "2026-01-01T00:00:00Z"
AT_6 = {"type": PRESSURE_CONDITION, "status": "True", "reason": PRESSURE_REASON,
        "message": "memory threshold met: memory usage >= 6%", "lastHeartbeatTime": SINCE, "lastTransitionTime": SINCE}


def test_a_new_message_is_patched_and_the_transition_time_kept() -> None:
    """The watermark moved from 6 % to 12 % and memory crossed it again: still True, but not for 6 %."""
    condition, patches = _patching()
    node = {"metadata": {"name": "n1"}, "status": {"conditions": [AT_6]}}
    condition.act(_on(node), condition.decide(_pressure(True, ["memory usage >= 6%"])), CycleReport("n1"))        # as on the node (a restart): nothing
    assert patches.bodies == []
    condition.act(_on(node), condition.decide(_pressure(True, ["memory usage >= 12%"])), CycleReport("n1"))
    condition.act(_on(node), condition.decide(_pressure(True, ["memory usage >= 12%"])), CycleReport("n1"))       # as last set: nothing
    [at_12] = patches.conditions()
    assert (at_12["status"], at_12["reason"], at_12["message"]) == ("True", PRESSURE_REASON,
                                                                    "memory threshold met: memory usage >= 12%")
    assert at_12["lastTransitionTime"] == SINCE and at_12["lastHeartbeatTime"] != SINCE  # the status did not move
    # The transition period (a new message again, the node not yet showing the last patch): still since SINCE.
    condition.act(_on(node), condition.decide(_pressure(True, [])), CycleReport("n1"))
    assert patches.conditions()[-1]["lastTransitionTime"] == SINCE
    condition.act(_on(node), condition.decide(_pressure(False, [])), CycleReport("n1"))                           # the status moves: now
    off = patches.conditions()[-1]
    assert (off["status"], off["reason"]) == ("False", NO_PRESSURE_REASON)
    assert off["lastTransitionTime"] == off["lastHeartbeatTime"] != SINCE
    assert len(patches.bodies) == 3


def test_a_new_reason_is_patched() -> None:
    condition, patches = _patching()
    left = {**AT_6, "status": "False", "reason": "SomethingElse", "message": "no memory threshold met"}
    condition.act(_on({"metadata": {"name": "n1"}, "status": {"conditions": [left]}}), condition.decide(_pressure(False, [])), CycleReport("n1"))
    [cond] = patches.conditions()
    assert (cond["reason"], cond["lastTransitionTime"]) == (NO_PRESSURE_REASON, SINCE)
