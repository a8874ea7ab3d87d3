"""Side by side with Koordinator's node components: which of the agent's capabilities run, and noticing another
writer of what the agent writes (koordlet, koord-manager's noderesource controller), so that the agent yields
instead of fighting over a value.

Each capability can be turned off on its own (``--disable``). Another writer is noticed by what the agent sees
between its own cycles:

- node status: the node's batch-cpu/batch-memory changed since the last cycle, to values the agent did not write;
- a cgroup file: the cycle's plan would write a file again with the very value the agent already wrote to it. The
  plan only writes what differs from the file, so someone changed the file since.

Either way the agent stops that capability until it restarts (resuming would only start the fight again), and
says so once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from webhook.agent.domain.cgroup_limits import CgroupWrite


class Capability(StrEnum):
    MEMORY_EVICTION = "memory-eviction"      # evictions by memory: BEMemoryEvict, MemoryAllocatableEvict, MemoryEvict
    KUBELET_EVICTION = "kubelet-eviction"    # BE evictions past the --eviction-* thresholds
    BATCH_RESOURCES = "batch-resources"      # batch-cpu / batch-memory and mid-cpu / mid-memory in the node status
    BE_CGROUP_LIMITS = "be-cgroup-limits"    # BE pods' batch requests and limits in their cgroups
    CPU_SUPPRESS = "cpu-suppress"            # the besteffort cgroup's CPU quota while LS pods need the CPU
    CPU_EVICTION = "cpu-eviction"            # evictions by CPU: BECPUEvict, CPUAllocatableEvict, CPUEvict


# Who does the same in a Koordinator install: what to turn on there when the agent's is off.
COUNTERPART = {
    Capability.MEMORY_EVICTION: "koordlet's BEMemoryEvict, MemoryAllocatableEvict and MemoryEvict feature gates",
    Capability.KUBELET_EVICTION: "the kubelet's own --eviction-* thresholds (for all pods, not BE first)",
    Capability.BATCH_RESOURCES: "koord-manager's slo-controller (noderesource, batch and mid resource plugins)",
    Capability.BE_CGROUP_LIMITS: "koordlet's resource executor (batch resource cgroups)",
    Capability.CPU_SUPPRESS: "koordlet's BECPUSuppress feature gate",
    Capability.CPU_EVICTION: "koordlet's BECPUEvict, CPUAllocatableEvict and CPUEvict feature gates",
}


class CapabilityError(ValueError):
    pass


def parse_disabled(values: Iterable[str]) -> frozenset[Capability]:
    """``--disable`` values (each a comma-separated list; empty items are allowed, so a manifest can carry an
    empty ``--disable=``) as capabilities; CapabilityError names an unknown one and lists the known ones."""
    known = {c.value: c for c in Capability}
    out = set()
    for value in values:
        for name in (n.strip() for n in value.split(",")):
            if not name:
                continue
            if name not in known:
                raise CapabilityError(f"unknown capability {name!r}; the capabilities are {', '.join(known)}")
            out.add(known[name])
    return frozenset(out)


def node_status_overwritten(seen_before: Mapping[str, int] | None, seen: Mapping[str, int],
                            written: Sequence[Mapping[str, int]]) -> bool:
    """True when another writer set the node's batch values: since the last cycle (``seen_before``) they changed
    to values the agent did not write. ``written`` holds the agent's last few writes: a watch that brings the
    agent's own patches late shows one of them (or the values from before), which is no other writer."""
    return bool(written) and seen_before is not None and dict(seen) != dict(seen_before) \
        and all(dict(seen) != dict(w) for w in written)


def rewrites(writes: Sequence[CgroupWrite], applied: Mapping[tuple[str, str], str]) -> list[CgroupWrite]:
    """The writes that would put back a value the agent already wrote to that file: another writer changed it."""
    return [w for w in writes if applied.get((w.path, w.file)) == w.value]
