"""BEMemoryPressure: the condition for the pressure seen, and a node status change only when it changes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from webhook.agent.capabilities.node_condition import (
    EVICTION_DISABLED_REASON,
    NO_PRESSURE_REASON,
    PRESSURE_CONDITION,
    PRESSURE_REASON,
    NodeCondition,
)
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions


def _condition(dry_run: bool = True, disabled: frozenset[Capability] = frozenset()) -> NodeCondition:
    metrics = AgentMetrics()
    return NodeCondition(AgentOptions("n1", dry_run=dry_run, transition_period=300.0, disabled=disabled),
                         Coexistence(disabled, metrics), None, metrics)


def _node(status: str | None = None) -> dict[str, Any]:
    conditions = [] if status is None else [{"type": PRESSURE_CONDITION, "status": status}]
    return {"metadata": {"name": "n1"}, "status": {"conditions": conditions}}


def test_pressure_names_the_thresholds_met() -> None:
    condition = _condition()
    cond = condition.decide(True, ["memory.available<30%"])
    assert (cond.type, cond.status, cond.reason, cond.message) == (
        PRESSURE_CONDITION, "True", PRESSURE_REASON, "memory threshold met: memory.available<30%")
    assert condition.metrics.registry.get_sample_value("colocation_agent_be_memory_pressure", {"node": "n1"}) == 1


def test_pressure_held_by_the_transition_period_says_so() -> None:
    assert _condition().decide(True, []).message == "memory threshold met within the last 300s transition period"


def test_no_pressure() -> None:
    cond = _condition().decide(False, [])
    assert (cond.status, cond.reason) == ("False", NO_PRESSURE_REASON)


def test_both_eviction_capabilities_off_is_unknown() -> None:
    cond = _condition(disabled=frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION})).decide(True, [])
    assert (cond.status, cond.reason) == ("Unknown", EVICTION_DISABLED_REASON)
    cond = _condition(disabled=frozenset({Capability.MEMORY_EVICTION})).decide(True, [])
    assert cond.status == "True"


def test_the_status_is_changed_only_when_it_differs(caplog: pytest.LogCaptureFixture) -> None:
    condition = _condition()
    with caplog.at_level(logging.INFO, "colocation-agent"):
        condition.act(_node("False"), condition.decide(False, []))     # as on the node: nothing
        condition.act(_node("False"), condition.decide(True, []))      # changed
        condition.act(_node("False"), condition.decide(True, []))      # as last set: nothing
    said = [r.getMessage() for r in caplog.records if "node condition" in r.getMessage()]
    assert said == ["dry-run: would set node condition BEMemoryPressure=True (memory threshold met within the "
                    "last 300s transition period)"]
    assert condition.last_status == "True"


def test_unknown_is_not_added_to_a_node_without_the_condition(caplog: pytest.LogCaptureFixture) -> None:
    condition = _condition(disabled=frozenset({Capability.MEMORY_EVICTION, Capability.KUBELET_EVICTION}))
    with caplog.at_level(logging.INFO, "colocation-agent"):
        condition.act(_node(), condition.decide(False, []))
        assert condition.last_status is None
        condition.act(_node("False"), condition.decide(False, []))   # one an earlier run left: Unknown now
    assert condition.last_status == "Unknown"
    assert len([r for r in caplog.records if "node condition" in r.getMessage()]) == 1


def test_without_an_api_or_a_dry_run_nothing_is_changed() -> None:
    condition = _condition(dry_run=False)
    condition.act(_node("False"), condition.decide(True, []))
    assert condition.last_status is None
