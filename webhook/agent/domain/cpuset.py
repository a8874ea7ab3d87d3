"""BE CPU suppression, ``cpuset`` policy (Koordinator koordlet ``cpusuppress``), pure.

The budget is the ``cfsQuota`` policy's (``cpu_suppress.suppress_milli``, milli-cores); here it becomes a number of
CPUs, those CPUs are chosen on the node's topology, and the writes of ``cpuset.cpus`` to the besteffort tier and
every folder below it (pods, containers) are put in an order the kernel accepts. Koordinator's
``pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go`` is the reference for each step:

- how many: ⌈budget / 1000⌉, at most ⌈10 % of the node's CPUs⌉ more than the tier holds now, and never fewer
  than 2 (``beMinCPUSetCores``) (``adjustByCPUSet``);
- which: never a CPU the node reserves (``node.koordinator.sh/reservation`` ``reservedCPUs``), one the system QoS
  holds exclusively (``node.koordinator.sh/system-qos-resource``) or one an LSE pod holds (its
  ``scheduling.koordinator.sh/resource-status`` cpuset). An LSR pod's CPUs may be shared with BE in Koordinator's
  model, so BE gets a share of them in proportion to their number; the rest comes from the other CPUs. In each pool
  the CPUs are spread over NUMA nodes and sockets, hyper-thread pairs of one core first
  (``calculateBESuppressCPUSetPolicy``);
- the order: first every folder, from the tier down, gets the union of what the tier held and the new set, then
  every folder, from the containers up, gets the new set (``applyCPUSetWithNonePolicy``): a parent is widened
  before its children, a child narrowed before its parent, so a cgroup v1 parent always holds its children's CPUs;
- recovery (suppression off, or the ``cfsQuota`` policy): every CPU BE may use at all (``recoverCPUSetIfNeed`` and
  ``calcBECPUSet``), with the same order.

One departure: when the pools hold fewer CPUs than asked, koordlet writes nothing that cycle; here BE gets every
CPU of the pools (what it asked for cannot be given, and keeping the old, smaller set protects nobody).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.agent.domain.cgroup_limits import CgroupWrite
from webhook.core.qos import is_terminal, koord_qos_class

CPUSET_POLICY = "cpuset"
CPUSET_FILE = "cpuset.cpus"
BE_MIN_CPUS = 2                      # koordlet beMinCPUSetCores
MAX_INCREASE_RATIO = 0.1             # koordlet beMaxIncreaseCPUPercent: both policies grow by at most this per cycle
NODE_RESERVATION = "node.koordinator.sh/reservation"
SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"
RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"


class CpuListError(ValueError):
    """A Linux CPU list (``0-3,8``) that cannot be read."""


# -- CPU lists ----------------------------------------------------------------------------------------------
def parse_cpu_list(text: str, where: str = "cpu list") -> frozenset[int]:
    """The CPUs a Linux CPU list names (``0-3,8`` -> {0, 1, 2, 3, 8}; empty text -> none).

    Raises ``CpuListError`` naming ``where`` and the part that is wrong.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise CpuListError(f"{where}: {part!r} in {text.strip()!r} is not a CPU number or range") from None
        if first < 0 or last < first:
            raise CpuListError(f"{where}: {part!r} in {text.strip()!r} is not a range of CPU numbers")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def cpuset_size(text: str) -> int | None:
    """How many CPUs a Linux CPU list names (``0-3,8`` -> 5), None when malformed."""
    try:
        return len(parse_cpu_list(text))
    except CpuListError:
        return None


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The kernel's form of a CPU list: ascending ranges (``{0, 1, 2, 3, 8}`` -> ``0-3,8``)."""
    parts: list[str] = []
    run: list[int] = []
    for cpu in sorted(set(cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            parts.append(_run_text(run))
        run = [cpu]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


# -- the node -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, order=True)
class ProcessorInfo:
    """One logical CPU and where it sits (koordlet ``pkg/koordlet/util/cpuinfo.go`` ``ProcessorInfo``)."""

    cpu: int
    core: int
    socket: int
    node: int                          # NUMA node


def _annotation_doc(obj: Mapping[str, Any] | None, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the JSON object in annotation ``key``, None) or (None, what is wrong with it); (None, None) when absent."""
    raw = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(key)
    if raw is None:
        return None, None
    try:
        doc = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as exc:
        return None, f"annotation {key}: not JSON ({exc})"
    if not isinstance(doc, dict):
        return None, f"annotation {key}: not a JSON object"
    return doc, None


def node_reservation(node: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``node.koordinator.sh/reservation`` document, None when absent or malformed."""
    return _annotation_doc(node, NODE_RESERVATION)[0]


def _cpus_of(doc: Mapping[str, Any] | None, field: str, where: str, problems: list[str]) -> frozenset[int]:
    raw = (doc or {}).get(field)
    if raw is None or raw == "":
        return frozenset()
    if not isinstance(raw, str):
        problems.append(f"{where}: {field} is not a CPU list string")
        return frozenset()
    try:
        return parse_cpu_list(raw, f"{where}: {field}")
    except CpuListError as exc:
        problems.append(str(exc))
        return frozenset()


def node_excluded_cpus(node: Mapping[str, Any] | None, problems: list[str]) -> frozenset[int]:
    """CPUs BE never gets on this node: ``reservedCPUs`` and an exclusive system-QoS cpuset (exclusive unless
    ``cpusetExclusive`` is false, as koordlet's ``SystemQOSResource.IsCPUSetExclusive``)."""
    name = ((node or {}).get("metadata") or {}).get("name") or "the node"
    out: set[int] = set()
    for key, field in ((NODE_RESERVATION, "reservedCPUs"), (SYSTEM_QOS_RESOURCE, "cpuset")):
        doc, problem = _annotation_doc(node, key)
        if problem is not None:
            problems.append(f"node {name}: {problem}")
        if doc is None or (key == SYSTEM_QOS_RESOURCE and doc.get("cpusetExclusive") is False):
            continue
        out |= _cpus_of(doc, field, f"node {name}: annotation {key}", problems)
    return frozenset(out)


def pod_held_cpus(pods: Iterable[dict[str, Any]], problems: list[str]) -> dict[int, str]:
    """CPU -> the Koordinator QoS class of the running pod that the scheduler bound it to (resource-status)."""
    held: dict[int, str] = {}
    for pod in pods:
        if is_terminal(pod):
            continue
        meta = pod.get("metadata") or {}
        where = f"pod {meta.get('namespace')}/{meta.get('name')}: annotation {RESOURCE_STATUS}"
        doc, problem = _annotation_doc(pod, RESOURCE_STATUS)
        if problem is not None:
            problems.append(f"pod {meta.get('namespace')}/{meta.get('name')}: {problem}")
        qos = koord_qos_class(pod)
        for cpu in _cpus_of(doc, "cpuset", where, problems):
            held[cpu] = qos
    return held


@dataclass(frozen=True, slots=True)
class Pools:
    """The CPUs BE may be given: from LSR pods' (shared with BE) and from the rest; and those it never gets."""

    lsr: tuple[ProcessorInfo, ...]
    other: tuple[ProcessorInfo, ...]
    excluded: frozenset[int]
    problems: tuple[str, ...] = ()

    @property
    def allowed(self) -> frozenset[int]:
        """Every CPU BE may use at all: what recovery writes."""
        return frozenset(p.cpu for p in (*self.lsr, *self.other))


def pools(processors: Sequence[ProcessorInfo], pods: Iterable[dict[str, Any]],
          node: Mapping[str, Any] | None) -> Pools:
    problems: list[str] = []
    excluded = set(node_excluded_cpus(node, problems))
    held = pod_held_cpus(pods, problems)
    lsr: list[ProcessorInfo] = []
    other: list[ProcessorInfo] = []
    for p in processors:
        qos = held.get(p.cpu)
        if p.cpu in excluded or qos == "LSE":
            excluded.add(p.cpu)
        else:
            (lsr if qos == "LSR" else other).append(p)
    return Pools(tuple(lsr), tuple(other), frozenset(excluded), tuple(problems))


# -- how many, which ----------------------------------------------------------------------------------------
def cpu_count(budget_milli: int, held_now: int, node_cpus: int) -> int:
    """CPUs for a budget of ``budget_milli``: rounded up, at most ⌈10 %⌉ of the node's ``node_cpus`` more than the
    ``held_now`` the tier holds (a cut applies at once), and never fewer than ``BE_MIN_CPUS``.

    koordlet applies the step after the minimum, so a tier holding nothing (cgroup v2's empty ``cpuset.cpus``) could
    get one CPU on a node of ten or fewer; here the minimum comes last.
    """
    cpus = -(-budget_milli // 1000)
    step = math.ceil(node_cpus * MAX_INCREASE_RATIO)
    return max(min(cpus, held_now + step), BE_MIN_CPUS)


def spread(count: int, processors: Sequence[ProcessorInfo]) -> list[int]:
    """``count`` CPUs of ``processors``, spread over (NUMA node, socket) groups in turn, the two threads of one core
    together while two or more are wanted, then single CPUs; [] when there are fewer than ``count``."""
    if count > len(processors):
        return []
    groups: dict[tuple[int, int], list[ProcessorInfo]] = {}
    for p in processors:
        groups.setdefault((p.node, p.socket), []).append(p)
    buckets = [sorted(g, key=lambda p: (p.core, p.cpu)) for g in groups.values()]
    buckets.sort(key=lambda b: (-len(b), b[0].cpu))     # the largest group first, then by its first CPU
    chosen: list[int] = []
    used: set[int] = set()
    need = count
    i = 0
    # Pairs: one per group per round, while two or more are wanted and a round still finds one.
    last_round = -1
    while need > 1:
        if i == 0:
            if last_round == need:
                break
            last_round = need
        bucket = buckets[i]
        for j in range(len(bucket) - 1):
            if bucket[j].cpu not in used and bucket[j].core == bucket[j + 1].core:
                chosen += [bucket[j].cpu, bucket[j + 1].cpu]
                used.update((bucket[j].cpu, bucket[j + 1].cpu))
                need -= 2
                break
        i = (i + 1) % len(buckets)
    # Singles: one per group per round, from the group the pairs stopped at.
    start, last_round = i, -1
    while need > 0:
        if i == start:
            if last_round == need:
                break
            last_round = need
        free = next((p.cpu for p in buckets[i] if p.cpu not in used), None)
        if free is not None:
            chosen.append(free)
            used.add(free)
            need -= 1
        i = (i + 1) % len(buckets)
    return chosen


@dataclass(frozen=True, slots=True)
class Choice:
    cpus: frozenset[int]
    asked: int                          # the CPU count the budget asked for (after the minimum and the step)
    explain: str


def choose(budget_milli: int, held_now: frozenset[int], all_cpus: int, pool: Pools) -> Choice:
    """The CPUs BE may use this cycle, for a budget (``suppress_milli``) and what the tier holds now."""
    asked = cpu_count(budget_milli, len(held_now), all_cpus)
    total = len(pool.lsr) + len(pool.other)
    count = min(asked, total)
    from_lsr = count * len(pool.lsr) // total if total else 0
    cpus = frozenset(spread(from_lsr, pool.lsr) + spread(count - from_lsr, pool.other))
    explain = (f"BE cpuset: {len(cpus)} CPUs ({format_cpu_list(cpus) or 'none'}) for a budget of {budget_milli}m "
               f"(asked {asked}: ⌈budget⌉, at least {BE_MIN_CPUS}, at most {len(held_now)} held now + "
               f"{math.ceil(all_cpus * MAX_INCREASE_RATIO)}), {from_lsr} of them from LSR pods' CPUs; "
               f"never {format_cpu_list(pool.excluded) or 'none'} (reserved, system QoS, LSE)")
    return Choice(cpus, asked, explain)


# -- the writes ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CpusetFolder:
    """One folder of the besteffort tree in the cpuset hierarchy and what its ``cpuset.cpus`` holds now."""

    path: str                           # relative to the cgroup root
    cpus: frozenset[int] | None         # None: the folder has no cpuset.cpus (cgroup v2, controller not enabled)


@dataclass(frozen=True, slots=True)
class CpusetTree:
    """The besteffort tier's folders in the cpuset hierarchy as read (``webhook.agent.edges.cpusets.read_tree``)."""

    folders: tuple[CpusetFolder, ...] = ()       # tier first, each folder before those in it
    held: frozenset[int] = frozenset()           # the CPUs the tier's pods may use now
    unavailable: str | None = None               # why the cpuset policy cannot act on this node
    problems: tuple[str, ...] = ()               # files that could not be read (their folders are left alone)


def plan_cpuset_writes(folders: Sequence[CpusetFolder], target: frozenset[int],
                       tier_held: frozenset[int] | None = None) -> list[CgroupWrite]:
    """The writes that bring every folder to ``target``, in an order the kernel accepts at every step.

    ``folders`` lists the tier first and every folder before the folders below it (pre-order, as a directory
    walk yields them); ``tier_held``: the CPUs the tier's pods may use now when its ``cpuset.cpus`` does not say
    (empty on cgroup v2: its parent's). A folder already holding the value of a step is not written.
    """
    if not folders or not target:
        return []
    held = {f.path: f.cpus for f in folders if f.cpus is not None}
    tier = tier_held if tier_held is not None else folders[0].cpus or frozenset()
    writes: list[CgroupWrite] = []
    for value, order in ((tier | target, folders), (target, list(reversed(folders)))):
        text = format_cpu_list(value)
        for folder in order:
            if folder.path in held and held[folder.path] != value:
                writes.append(CgroupWrite(folder.path, CPUSET_FILE, text))
                held[folder.path] = value
    return writes
