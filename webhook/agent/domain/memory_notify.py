"""When a memory notification should bring the agent's cycle forward, pure.

The agent's memory thresholds are on node usage, ``used = MemTotal − MemAvailable``; ``trigger_level`` is the
usage at which the first of them is met. A kernel notifier watches another measure (cgroup v1: the root memory
cgroup's ``memory.usage_in_bytes``, which also counts page cache), so, like the kubelet's memcg notifier, the
threshold is set in that measure's own terms: its current value plus the distance left to the level. The
offset between the two drifts with the page cache, so the threshold is set again after every cycle.

``SamplerGate`` is the edge trigger of the polling fallback: one cycle when usage reaches the level, then none
until usage has fallen below it by a margin.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from webhook.agent.domain.thresholds import MEMORY_AVAILABLE, Threshold, met_at_used

# What ``--memory-notification`` accepts (the sources are in ``webhook.agent.edges.notify``).
MODES = ("auto", "memcg-threshold", "psi", "sampler", "none")
REARM_FRACTION = 1024          # re-arm when the wanted threshold moved by more than capacity / 1024
MIN_REARM_BYTES = 1 << 20
SAMPLER_MARGIN_FRACTION = 1000  # hysteresis: usage must fall capacity / 1000 below the level to re-arm
NEAR_FRACTION = 20        # within 5 % of capacity below the level, meminfo is sampled beside the threshold


def trigger_level(thresholds: Iterable[Threshold], capacity: int) -> int | None:
    """Node usage (bytes) at which the first ``memory.available`` threshold is met; None without one."""
    levels = [met_at_used(t, capacity) for t in thresholds if t.signal == MEMORY_AVAILABLE]
    return min(levels) if levels else None


def memcg_threshold(level: int, node_used: int, memcg_usage: int) -> int:
    """The ``memory.usage_in_bytes`` value that corresponds to node usage reaching ``level``."""
    return max(memcg_usage + (level - node_used), 1)


def rearm_tolerance(capacity: int) -> int:
    return max(capacity // REARM_FRACTION, MIN_REARM_BYTES)


def near_level(level: int | None, used: int, capacity: int) -> bool:
    """Whether usage is close enough below ``level`` for a kernel notifier's measure to lag it: the watch
    then samples meminfo too."""
    return level is not None and used >= level - capacity // NEAR_FRACTION


def needs_rearm(armed: int | None, wanted: int, capacity: int) -> bool:
    return armed is None or abs(armed - wanted) > rearm_tolerance(capacity)


@dataclass
class SamplerGate:
    """Fires once when usage reaches ``level``; re-arms when usage drops a margin below it."""

    level: int | None = None
    margin: int = 0
    armed: bool = True

    def set_level(self, level: int | None, capacity: int) -> None:
        if level != self.level:
            self.level = level
            self.armed = True
        self.margin = capacity // SAMPLER_MARGIN_FRACTION

    def feed(self, used: int) -> bool:
        if self.level is None:
            return False
        if used < self.level:
            if used < self.level - self.margin:
                self.armed = True
            return False
        if self.armed:
            self.armed = False
            return True
        return False
