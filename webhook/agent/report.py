"""What one cycle measured, decided and did: the document ``colocation-agent once`` prints (``as_dict``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.agent.domain.cgroup_limits import CgroupWrite
from webhook.core.resources import BATCH_RESOURCES, MID_RESOURCES


@dataclass(frozen=True, slots=True)
class MemoryReport:
    capacity_bytes: int
    used_bytes: int

    @property
    def usage_percent(self) -> float:
        return round(self.used_bytes * 100 / self.capacity_bytes, 2) if self.capacity_bytes else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"capacityBytes": self.capacity_bytes, "usedBytes": self.used_bytes,
                "usagePercent": self.usage_percent}


@dataclass(frozen=True, slots=True)
class EvictionReport:
    namespace: str
    name: str
    uid: str
    priority: int | None
    usage_bytes: int
    reason: str
    cpu_milli: int | None = None     # a CPU eviction's: the pod's CPU usage, milli-cores

    def as_dict(self) -> dict[str, Any]:
        out = {"namespace": self.namespace, "name": self.name, "uid": self.uid, "priority": self.priority,
               "usageBytes": self.usage_bytes, "reason": self.reason}
        if self.cpu_milli is not None:
            out["cpuMilli"] = self.cpu_milli
        return out


@dataclass(frozen=True, slots=True)
class CPUEvictionReport:
    """One eviction feature's decision this cycle (CPU eviction's, and memory eviction's priority features): what
    it found, what it would release (None: nothing), and whether the cooldown held it back."""

    feature: str
    decision: str
    release: Mapping[str, int] | None = None
    cooling: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "decision": self.decision,
                "release": None if self.release is None else dict(self.release), "cooldown": self.cooling}


@dataclass(frozen=True, slots=True)
class Condition:
    """A node condition as the agent sets it (``status``: True, False or Unknown)."""

    type: str
    status: str
    reason: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message}


@dataclass(frozen=True, slots=True)
class SuppressReport:
    """BE CPU suppression this cycle: the policy in force (None: off), the CPUs BE pods may use (their cpuset, as
    the agent last read or wrote it), the cores they may use under the policy, why cfsQuota stands in for
    cpuset (None when it does not), and why the policy the config enables does not act at all (None when it
    does)."""

    policy: str | None
    cpus: str | None
    cores: float | None
    fallback: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "beCPUs": self.cpus, "cores": self.cores, "fallback": self.fallback,
                "reason": self.reason}


@dataclass(slots=True)
class CycleReport:
    node: str
    memory: MemoryReport | None = None            # None when node memory could not be measured
    release_target_bytes: int = 0                 # the most memory a threshold asks to release
    evictions: list[EvictionReport] = field(default_factory=list)
    batch: dict[str, int] = field(default_factory=lambda: {name: 0 for name in BATCH_RESOURCES})
    batch_reason: str | None = None               # why a batch value is 0
    conditions: list[Condition] = field(default_factory=list)
    cgroup_writes: list[CgroupWrite] = field(default_factory=list)
    capabilities_off: dict[str, str] = field(default_factory=dict)   # capability -> why it does not run
    cpu_suppress: SuppressReport | None = None    # None: the capability did not run (off, or nothing measured)
    config_error: str | None = None               # why slo-controller-config is not in force (the last good is)
    config_warnings: list[str] = field(default_factory=list)   # its unknown keys (most likely misspelt)
    config_notices: list[str] = field(default_factory=list)    # its Koordinator keys this agent does not act on
    mid: dict[str, int] = field(default_factory=lambda: {name: 0 for name in MID_RESOURCES})
    mid_reason: str | None = None                 # why a mid value is 0, held, or raised
    cpu_eviction: list[CPUEvictionReport] = field(default_factory=list)   # each CPU eviction feature in force
    memory_eviction: list[CPUEvictionReport] = field(default_factory=list)  # MemoryEvict, MemoryAllocatableEvict

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "memory": None if self.memory is None else self.memory.as_dict(),
                "releaseTargetBytes": self.release_target_bytes,
                "evictions": [e.as_dict() for e in self.evictions], "batch": dict(self.batch),
                "batchReason": self.batch_reason, "mid": dict(self.mid), "midReason": self.mid_reason,
                "conditions": [c.as_dict() for c in self.conditions],
                "cgroupWrites": [w.as_dict() for w in self.cgroup_writes],
                "cpuSuppress": None if self.cpu_suppress is None else self.cpu_suppress.as_dict(),
                "cpuEviction": [c.as_dict() for c in self.cpu_eviction],
                "memoryEviction": [c.as_dict() for c in self.memory_eviction],
                "capabilitiesOff": dict(self.capabilities_off), "configError": self.config_error,
                "configWarnings": list(self.config_warnings), "configNotices": list(self.config_notices)}
