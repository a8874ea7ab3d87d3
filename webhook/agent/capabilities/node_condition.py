"""The node condition ``BEMemoryPressure``: True while a memory threshold is met, False when none is; the
agent's own condition, patched into the node status when its status, reason or message changes (the thresholds
met are in the message), with ``lastTransitionTime`` moved only when the status does (``NodeCondition`` in
``staging/src/k8s.io/api/core/v1/types.go``: "Last time the condition transit from one status to another")."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from webhook.agent.capabilities.contract import Readings
from webhook.agent.capabilities.shared import Shared
from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.coexistence import Capability
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.agent.report import Condition, CycleReport

if TYPE_CHECKING:
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")
PRESSURE_CONDITION = "BEMemoryPressure"
PRESSURE_REASON, NO_PRESSURE_REASON = "BEMemoryThresholdMet", "BEMemoryThresholdNotMet"
# Both eviction capabilities off: the agent handles no memory pressure, so it claims neither True nor False. It
# adds no condition to a node without one, and turns one an earlier run left into Unknown (a stale False would
# say pressure is watched, a stale True would hold forever).
EVICTION_DISABLED_REASON = "EvictionDisabled"


def _wall() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeCondition(Shared):
    names: ClassVar[tuple[Capability, ...]] = ()   # no --disable of its own: it says what memory eviction sees

    def __init__(self, options: AgentOptions, coexistence: Coexistence, actions: KubeActions | None,
                 metrics: AgentMetrics) -> None:
        super().__init__(options, coexistence, actions, metrics)
        self.last: Condition | None = None       # the condition the agent last set
        self.last_transition: str | None = None  # and its lastTransitionTime

    @property
    def last_status(self) -> str | None:
        return self.last.status if self.last is not None else None

    def decide(self, readings: Readings) -> Condition:
        """The condition for what memory eviction concluded (``readings.memory_pressure``)."""
        pressure, observed = readings.memory_pressure.met, readings.memory_pressure.observed
        self.metrics.pressure.labels(self.options.node_name).set(1 if pressure else 0)
        on = self.coexistence.on
        if not (on(Capability.MEMORY_EVICTION) or on(Capability.KUBELET_EVICTION)):
            return Condition(PRESSURE_CONDITION, "Unknown", EVICTION_DISABLED_REASON,
                             f"{Capability.MEMORY_EVICTION} and {Capability.KUBELET_EVICTION} are disabled: the "
                             "agent handles no BE memory pressure")
        if pressure:
            message = ("memory threshold met: " + ", ".join(observed) if observed else
                       f"memory threshold met within the last {self.options.transition_period:g}s transition period")
            return Condition(PRESSURE_CONDITION, "True", PRESSURE_REASON, message)
        return Condition(PRESSURE_CONDITION, "False", NO_PRESSURE_REASON, "no memory threshold met")

    def act(self, readings: Readings, decision: Condition, report: CycleReport) -> None:
        """Patch the condition (``decision``) into the node status when it differs from the one there (or the one
        last set)."""
        report.conditions = [decision]
        cond = decision
        node = readings.inputs.node
        if node is None or not self.writes_node(node):
            return
        on_node: dict[str, Any] = next((c for c in ((node.get("status") or {}).get("conditions") or [])
                                        if isinstance(c, dict) and c.get("type") == PRESSURE_CONDITION), {})
        # What the agent last set, else (a restart) what the node holds: the node in the cache may not show the
        # last patch yet.
        if self.last is not None:
            known, since = self.last.as_dict(), self.last_transition
        else:
            known, since = on_node, on_node.get("lastTransitionTime")
        if (not known and cond.reason == EVICTION_DISABLED_REASON) or all(
                known.get(k) == v for k, v in cond.as_dict().items()):
            return
        stamp = _wall()
        transition = since if known.get("status") == cond.status and isinstance(since, str) and since else stamp
        body = {"status": {"conditions": [{**cond.as_dict(), "lastHeartbeatTime": stamp,
                                           "lastTransitionTime": transition}]}}
        if self.options.dry_run:
            log.info("dry-run: would set node condition %s=%s (%s)", PRESSURE_CONDITION, cond.status,
                     cond.message)
        elif self.actions is None or not self.actions.patch_node_status(body):
            return
        self.last, self.last_transition = cond, transition
