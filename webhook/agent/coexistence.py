"""Which capabilities run this cycle: not turned off (``--disable``) and not yielded to another writer of what
they write (webhook.agent.domain.coexistence notices the other writer; this says so, once, and remembers)."""

from __future__ import annotations

import logging

from webhook.agent.domain.coexistence import COUNTERPART, Capability
from webhook.agent.metrics import AgentMetrics

log = logging.getLogger("colocation-agent")


class Coexistence:
    def __init__(self, disabled: frozenset[Capability], metrics: AgentMetrics) -> None:
        self.disabled = disabled
        self.metrics = metrics
        # Another writer of what the agent writes: the capability it was noticed on, and what was seen.
        self.yielded: dict[Capability, str] = {}
        for cap in Capability:
            metrics.capability.labels(cap.value).set(0 if cap in disabled else 1)

    def on(self, cap: Capability) -> bool:
        """Whether ``cap`` runs: not turned off (``--disable``) and not yielded to another writer."""
        return cap not in self.disabled and cap not in self.yielded

    def yield_to_other_writer(self, cap: Capability, seen: str) -> None:
        """Another writer manages ``cap``: stop writing it (until a restart), and say so once."""
        self.yielded[cap] = seen
        self.metrics.capability.labels(cap.value).set(0)
        self.metrics.other_writer.labels(cap.value).set(1)
        log.warning("another writer changed what %s writes (%s); the agent stops writing it rather than fight. "
                    "If that is %s, turn the agent's off: --disable=%s (docs/coexistence.md, \"Beside Koordinator\")",
                    cap.value, seen, COUNTERPART[cap], cap.value)

    def off(self) -> dict[str, str]:
        """The capabilities that do not run, and why (the report's ``capabilitiesOff``)."""
        return {**{c.value: "disabled" for c in sorted(self.disabled)},
                **{c.value: f"another writer: {seen}" for c, seen in self.yielded.items()}}
