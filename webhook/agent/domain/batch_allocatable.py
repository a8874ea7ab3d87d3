"""Batch allocatable: what BE pods may use, published as kubernetes.io/batch-cpu/-memory (docs/agent.md).

    batch = allocatable × reclaimThresholdPercent/100 − Σ usage(non-BE pods) − system usage

clamped at 0, with system usage = max(node used − Σ pod usage, 0) and usage averaged over
metricAggregateDurationSeconds; memory policy ``request`` counts the non-BE pods' requests instead of their usage
(Koordinator's ``pkg/slo-controller/noderesource/plugins/batchresource/plugin.go``). A BE pod's sandbox overhead
(``spec.overhead``, native cpu/memory the scheduler charges to the node as for any pod) counts with the non-BE pods,
by its value: the node lends to batch only what it has not already given natively. Exact arithmetic; results are
rounded down to whole milli-cores and whole bytes, so the agent never publishes more than the formula allows.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from webhook.agent.domain.mid_allocatable import MidResult
from webhook.core.quantity import QuantityError, parse_quantity
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, BATCH_RESOURCES, MID_RESOURCES

# What the batch-resources capability publishes in the node status, in one patch: batch and mid, as koord-manager's
# noderesource controller writes both plugins' results in one update (docs/agent.md, "Mid resources").
PUBLISHED = (*BATCH_RESOURCES, *MID_RESOURCES)


class PodLoad(NamedTuple):
    """One pod's averaged usage (None when never measured), its requests, and its sandbox overhead
    (``spec.overhead``; read for BE pods only, the others' requests hold it already)."""

    be: bool
    cpu_milli: float | None
    memory: float | None
    cpu_request_milli: int
    memory_request: int
    overhead_cpu_milli: int = 0
    overhead_memory: int = 0


@dataclass(frozen=True, slots=True)
class BatchResult:
    cpu_milli: int
    memory: int
    explain: tuple[str, str]
    zero: tuple[str, ...] = ()      # why a value is 0, per resource that is


    def resources(self) -> dict[str, int]:
        return {BATCH_CPU: self.cpu_milli, BATCH_MEMORY: self.memory}


def _one(label: str, short: str, allocatable: int, percent: int, hp: Fraction,
         system: Fraction) -> tuple[int, str, str | None]:
    """(value, koordlet's explain line, why the value is 0 or None)."""
    reserved = Fraction(allocatable * percent, 100)
    value = max(0, math.floor(reserved - hp - system))
    why = None
    if value == 0:
        if allocatable <= 0:
            why = f"{short} 0: no node capacity (allocatable {allocatable})"
        elif percent <= 0:
            why = f"{short} 0: the reclaim threshold is {percent}%"
        else:
            why = (f"{short} 0: usage above the threshold (non-BE {float(hp):.0f} + system {float(system):.0f} "
                   f">= allocatable {allocatable} × {percent}%)")
    return value, (f"batchAllocatable[{label}]:{value} = nodeAllocatable:{allocatable} × {percent}% "
                   f"- podHPUsed:{float(hp):.0f} - systemUsage:{float(system):.0f}"), why


def batch_allocatable(alloc_cpu_milli: int, alloc_memory: int, node_cpu_milli: float, node_memory: float,
                      pods: Iterable[PodLoad], cpu_percent: int, memory_percent: int,
                      memory_policy: str = "usage") -> BatchResult:
    """The formula above for one node; a non-BE pod never measured counts its request, a BE pod its
    sandbox overhead."""
    # Plain float/int sums on the hot path; exact arithmetic for the formula itself (``_one``).
    pod_cpu = pod_mem = 0.0
    hp_cpu = hp_mem = 0.0
    hp_mem_request = 0
    hp_mem_max = 0.0
    for p in pods:
        if p.cpu_milli is not None:
            pod_cpu += p.cpu_milli
        if p.memory is not None:
            pod_mem += p.memory
        if p.be:
            # Its sandbox's share is native: held like a non-BE pod's request (its use is not told apart from
            # its containers' in the pod cgroup, and the scheduler charged the whole of it).
            hp_cpu += p.overhead_cpu_milli
            hp_mem += p.overhead_memory
            hp_mem_request += p.overhead_memory
            hp_mem_max += p.overhead_memory
            continue
        mem = p.memory if p.memory is not None else p.memory_request
        hp_cpu += p.cpu_milli if p.cpu_milli is not None else p.cpu_request_milli
        hp_mem += mem
        hp_mem_request += p.memory_request
        hp_mem_max += max(mem, p.memory_request)
    system_cpu = max(Fraction(node_cpu_milli) - Fraction(pod_cpu), Fraction(0))
    system_mem = max(Fraction(node_memory) - Fraction(pod_mem), Fraction(0))
    hp_memory = {"request": hp_mem_request, "maxUsageRequest": hp_mem_max}.get(memory_policy, hp_mem)
    cpu, cpu_text, cpu_why = _one("CPU(Milli-Core)", "batch-cpu", alloc_cpu_milli, cpu_percent, Fraction(hp_cpu),
                                  system_cpu)
    mem, mem_text, mem_why = _one("Memory(Byte)", "batch-memory", alloc_memory, memory_percent, Fraction(hp_memory),
                                  system_mem)
    return BatchResult(cpu, mem, (cpu_text, mem_text), tuple(w for w in (cpu_why, mem_why) if w is not None))


def withheld(enabled: bool, config: str | None, last_sample: float | None, now: float,
             degrade_minutes: float, invalid: str | None = None) -> str | None:
    """Why the formula does not run (batch resources are 0, withdrawn, or held: ``holding``), or None when it
    does. ``config``: the slo-controller-config ConfigMap's namespace/name, None when there is none; ``invalid``:
    why it is not in force (the last good configuration is)."""
    if not enabled:
        if config is None:
            return "colocation is off: no slo-controller-config ConfigMap (off by default)"
        if invalid is not None:
            return (f"colocation is off: slo-controller-config {config} is invalid ({invalid}) and the last good "
                    "configuration, in force (the defaults if none was read), does not enable it")
        return f"colocation is disabled in slo-controller-config {config} (colocation-config enable, for this node)"
    if last_sample is None:
        return NOTHING_MEASURED
    if degraded(last_sample, now, degrade_minutes):
        return f"usage data older than {degrade_minutes:g} minutes (degradeTimeMinutes)"
    return None


NOTHING_MEASURED = "no usage measured yet"
NO_CPU_RATE = "no CPU usage rate measured yet (a rate needs two samples)"


def holding(why: str | None, started: float, now: float, degrade_minutes: float) -> bool:
    """Whether the values on the node are left as they are, neither recomputed nor withdrawn: an agent with no
    sample yet (just started, or its collectors failing since) knows nothing new, and what an earlier run
    published is better than 0 or nothing (a kubelet restart re-admits bound pods against it), until
    ``degrade_minutes`` after it ``started``; likewise while no CPU rate is measured (the first sample has none:
    counting it as 0 published 1950 milli-cores where a second later the node had 940)."""
    return why in (NOTHING_MEASURED, NO_CPU_RATE) and not degraded(started, now, degrade_minutes)


def admitted(pods: Iterable[tuple[int, ...]], names: tuple[str, ...] = BATCH_RESOURCES) -> dict[str, int]:
    """The requests of the pods bound to the node and not finished, summed: one value per name of ``names`` each
    (batch-cpu and batch-memory; with mid-cpu and mid-memory, PUBLISHED).
    The kubelet admits its pods again against the node's allocatable whenever it restarts (pkg/kubelet/lifecycle
    ``predicateAdmitHandler``, through ``noderesources.Fits``) and fails a pod that no longer fits
    (``OutOf<resource>``): publishing less than this would let a kubelet restart kill running BE pods."""
    sums = [0] * len(names)
    for pod in pods:
        for i, value in enumerate(pod):
            sums[i] += value
    return dict(zip(names, sums, strict=True))


def with_floor(computed: Mapping[str, int], floor: Mapping[str, int]) -> tuple[dict[str, int], tuple[str, ...]]:
    """``computed`` raised to ``floor`` resource by resource, and a line for each value raised. The scheduler's view
    does not change: it fits a pod against allocatable − Σ requests, which is ≤ 0 either way once the formula is
    below the requests, so no new batch pod is placed; the pressure is left to suppression and eviction."""
    out, raised = dict(computed), []
    for name, value in computed.items():
        least = floor.get(name, 0)
        if least > value:
            out[name] = least
            raised.append(f"{name} held at {least} (the requests of the pods bound to the node) above "
                          f"{value}, so that a kubelet restart admits them again")
    return out, tuple(raised)


def zero_reason(withheld_why: str | None, result: BatchResult | MidResult | None, node: str | None) -> str | None:
    """Why some batch value is 0, in one line: what ``withheld`` said, else the formula's reasons; ``node`` names a
    Node object that was not found (this machine stood in for it, and nothing is published). None when no value
    is 0."""
    parts = [withheld_why] if withheld_why is not None else list(result.zero if result is not None else ())
    if not parts:
        return None
    if node is not None:
        parts.append(f"no Node object {node} found (this machine's capacity stands in; nothing is published)")
    return "; ".join(parts)


class UsageWindow:
    """Averages of node and per-pod usage over the last ``seconds`` (running sums, O(pods) per sample).

    Values are kept as integers (micro-cores, bytes) so adding and expiring samples never drifts.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._samples: deque[tuple[float, dict[str, tuple[int | None, int | None]]]] = deque()
        self._sums: dict[str, list[int]] = {}   # key -> [cpu sum, cpu count, mem sum, mem count]
        self.last_time: float | None = None

    def add(self, now: float, values: Mapping[str, tuple[float | None, int | None]]) -> None:
        """``values``: key ("" for the node, else a pod uid) -> (milli-cores or None, bytes or None)."""
        sample = {k: (None if c is None else round(c * 1000), m) for k, (c, m) in values.items()}
        self._samples.append((now, sample))
        self._apply(sample, 1)
        self.last_time = now
        self.expire(now)

    def expire(self, now: float) -> None:
        while self._samples and now - self._samples[0][0] >= self.seconds and len(self._samples) > 1:
            self._apply(self._samples.popleft()[1], -1)

    def _apply(self, sample: Mapping[str, tuple[int | None, int | None]], sign: int) -> None:
        sums = self._sums
        for key, (cpu, mem) in sample.items():
            acc = sums.get(key)
            if acc is None:
                acc = sums[key] = [0, 0, 0, 0]
            if cpu is not None:
                acc[0] += sign * cpu
                acc[1] += sign
            if mem is not None:
                acc[2] += sign * mem
                acc[3] += sign
            if sign < 0 and acc[1] == 0 and acc[3] == 0:
                del sums[key]

    def average(self, key: str) -> tuple[float | None, float | None]:
        """(milli-cores, bytes) averaged over the samples that measured them; None when none did."""
        acc = self._sums.get(key)
        if acc is None:
            return None, None
        cpu = acc[0] / acc[1] / 1000 if acc[1] else None
        mem = acc[2] / acc[3] if acc[3] else None
        return cpu, mem

    def __len__(self) -> int:
        return len(self._samples)


def published(status: Mapping[str, object] | None) -> dict[str, int]:
    """Batch and mid values currently on the node (``status.allocatable``), as whole numbers."""
    out: dict[str, int] = {}
    for name in PUBLISHED:
        raw = (status or {}).get(name)
        if raw is None:
            continue
        try:
            out[name] = math.ceil(parse_quantity(raw))
        except QuantityError:
            continue
    return out


def needs_update(current: Mapping[str, int], wanted: Mapping[str, int] | None, last_update: float | None,
                 now: float, diff_threshold: float, update_seconds: float, report_seconds: float = 0) -> bool:
    """Koordinator's anti-churn (``isNodeResourceSyncNeeded``); ``wanted`` None means remove them.

    koord-manager recomputes a node when its NodeMetric is reported, every ``metricReportIntervalSeconds``
    (60 s): a value that moved by more than ``diff_threshold`` is written at most that often. The agent
    measures every second, so without that interval a value near a 10 % step was written many times a minute
    (154 writes in 13.5 minutes on a real node). A missing value and a removal are written at once."""
    if wanted is None:
        return any(name in current for name in PUBLISHED)
    if any(name not in current for name in wanted) or any(name not in wanted for name in current):
        return True
    if last_update is None or now - last_update > update_seconds:
        return True
    if now - last_update < report_seconds:
        return False
    return any(abs(new - current[name]) > current[name] * diff_threshold for name, new in wanted.items())


def status_patch(wanted: Mapping[str, int] | None, current: Iterable[str] = BATCH_RESOURCES) -> dict[str, object]:
    """Strategic-merge patch body for ``nodes/status``: set both maps to ``wanted``, and null the keys of
    ``current`` (the names on the node now) that are not wanted (all of them: ``wanted`` None) to remove them."""
    wanted = wanted or {}
    values: dict[str, object] = {name: None for name in current if name not in wanted}
    values.update((name, str(v)) for name, v in wanted.items())
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


def degraded(last_sample: float | None, now: float, degrade_minutes: float) -> bool:
    """Usage data too old (or none at all): batch resources must be withdrawn."""
    return last_sample is None or now - last_sample > degrade_minutes * 60
