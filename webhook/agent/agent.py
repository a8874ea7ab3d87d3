"""The node agent's cycle: measure, decide (webhook.agent.domain and webhook.core), act (or log, in dry runs).

Everything that decides is pure, in ``webhook.agent.domain`` and the shared ``webhook.core``; this module only
wires samples, cluster objects and configuration into those functions and hands the outcome to ``KubeActions``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from webhook.agent.actions import EvictOutcome, KubeActions
from webhook.agent.cgroups import CgroupFiles
from webhook.agent.collectors import CollectError, Collector, Layout, Sample, used_memory
from webhook.agent.domain import batch_allocatable as batchcalc
from webhook.agent.domain import cpu_suppress as suppress
from webhook.agent.domain.cgroup_limits import (
    DEFAULT_CFS_PERIOD,
    UNLIMITED,
    CgroupWrite,
    Current,
    Folder,
    plan_writes,
    sandbox_overhead,
)
from webhook.agent.domain.coexistence import COUNTERPART, Capability, node_status_overwritten, rewrites
from webhook.agent.domain.eviction import (
    EVENT_ACTION,
    EVENT_REASON_FAIL,
    EVENT_REASON_SUCCESS,
    EVICT_BY_NODE_MEMORY_USAGE,
    EvictionMemory,
    Victim,
    build_tasks,
    candidates,
    select_victims,
)
from webhook.agent.domain.memory_notify import trigger_level
from webhook.agent.domain.slo_config import ConfigTracker, CPUSuppress
from webhook.agent.domain.thresholds import (
    DEFAULT_PRESSURE_TRANSITION_PERIOD,
    MEMORY_AVAILABLE,
    EngineState,
    Observation,
    Threshold,
    evaluate,
    watermark_threshold,
)
from webhook.agent.metrics import UNITS, AgentMetrics, Health
from webhook.agent.notify import WAKE, MemoryWatch
from webhook.cluster.state import SLO_CONFIG_NAME, SLO_CONFIG_NAMESPACE, ClusterState
from webhook.core.qos import is_be, is_terminal, kube_qos_class
from webhook.core.quantity import QuantityError, int_value, milli_value, parse_quantity
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, BATCH_RESOURCES, CPU, MEMORY, pod_requests

log = logging.getLogger("colocation-agent")
T = TypeVar("T")

WRITES_REMEMBERED = 3   # the agent's own node-status writes a late watch may still show
PRESSURE_CONDITION = "BEMemoryPressure"
PRESSURE_REASON, NO_PRESSURE_REASON = "BEMemoryThresholdMet", "BEMemoryThresholdNotMet"
# Both eviction capabilities off: the agent handles no memory pressure, so it claims neither True nor False. It
# adds no condition to a node without one, and turns one an earlier run left into Unknown (a stale False would
# say pressure is watched, a stale True would hold forever).
EVICTION_DISABLED_REASON = "EvictionDisabled"
CONFIG_EVENT_REASON, CONFIG_EVENT_ACTION = "ColocationCfgInvalid", "LoadConfig"


@dataclass
class AgentOptions:
    node_name: str
    thresholds: list[Threshold] = field(default_factory=list)   # from the --eviction-* flags
    transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    config_map: tuple[str, str] = (SLO_CONFIG_NAMESPACE, SLO_CONFIG_NAME)
    dry_run: bool = False
    enforce: bool = False          # write cgroups (``run``); ``once`` only lists the writes
    disabled: frozenset[Capability] = frozenset()   # --disable: left to another component


def _quantity(raw: Any) -> Any:
    try:
        return parse_quantity(raw) if raw is not None else None
    except QuantityError:
        return None


@dataclass(frozen=True, slots=True)
class PodView:
    """What a cycle needs of one pod object, worked out once per object (sources replace whole objects)."""

    obj: dict[str, Any]
    uid: str
    be: bool                  # Koordinator BE: may be evicted, gets batch limits
    besteffort: bool          # in the besteffort cgroup: BE, or the kubelet's BestEffort
    finished: bool            # Succeeded or Failed
    cpu_request_milli: int
    memory_request: int
    overhead_cpu_milli: int = 0      # a BE pod's sandbox overhead (spec.overhead), native: batch_allocatable
    overhead_memory: int = 0


def pod_view(pod: dict[str, Any]) -> PodView:
    be = is_be(pod)
    req = pod_requests(pod)
    overhead = sandbox_overhead(pod) if be and (pod.get("spec") or {}).get("overhead") else {}
    return PodView(pod, (pod.get("metadata") or {}).get("uid") or "", be,
                   be or kube_qos_class(pod) == "BestEffort",
                   is_terminal(pod),
                   milli_value(req[CPU]) if CPU in req else 0, int_value(req[MEMORY]) if MEMORY in req else 0,
                   int(overhead.get(BATCH_CPU, 0)), int(overhead.get(BATCH_MEMORY, 0)))


def _wall() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Agent:
    """One node's agent. ``cycle()`` returns the decision document that ``once`` prints."""

    def __init__(self, options: AgentOptions, collector: Collector, state: ClusterState | None = None,
                 actions: KubeActions | None = None, metrics: AgentMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.node_name = options.node_name
        self.collector = collector
        self.state = state
        self.actions = actions
        self.metrics = metrics or AgentMetrics()
        self.clock = clock
        self.config = ConfigTracker()
        self.engine = EngineState()
        self.memory = EvictionMemory()
        self.window = batchcalc.UsageWindow(60)
        self.last_batch_update: float | None = None
        self.last_condition: str | None = None
        self._last_collect_error: str | None = None
        self._views: dict[int, PodView] = {}    # id(pod object) -> its view; the view holds the object
        self._views_of: list[dict[str, Any]] | None = None   # the pod list they were made for
        self._view_list: list[PodView] = []
        self._cgroups: CgroupFiles | None = None
        self._planned = True                     # the last plan had writes (or there was none yet)
        self._suppress_recovered = False        # koordlet recovers the besteffort quota once when not suppressing
        self._cpuset_warned = False
        self.trigger_level: int | None = None    # node usage at which the next memory threshold is met
        self.capacity = 0
        self.seen_used: int | None = None        # node usage the last cycle measured
        self.first_evict_at: float | None = None  # monotonic time of this cycle's first eviction request
        # Another writer of what the agent writes: the capability it was noticed on, and what was seen.
        self.yielded: dict[Capability, str] = {}
        self._applied: dict[tuple[str, str], str] = {}   # (cgroup folder, file) -> the value the agent wrote
        self._batch_seen: dict[str, int] | None = None   # the node's batch values the last cycle saw
        self._batch_written: list[dict[str, int]] = []    # the agent's last few writes of them ({}: removed)
        self.batch_reason: str | None = None             # why a batch value of the last cycle is 0
        for cap in Capability:
            self.metrics.capability.labels(cap.value).set(0 if cap in options.disabled else 1)

    def on(self, cap: Capability) -> bool:
        """Whether ``cap`` runs: not turned off (``--disable``) and not yielded to another writer."""
        return cap not in self.options.disabled and cap not in self.yielded

    def _yield(self, cap: Capability, seen: str) -> None:
        """Another writer manages ``cap``: stop writing it (until a restart), and say so once."""
        self.yielded[cap] = seen
        self.metrics.capability.labels(cap.value).set(0)
        self.metrics.other_writer.labels(cap.value).set(1)
        log.warning("another writer changed what %s writes (%s); the agent stops writing it rather than fight. "
                    "If that is %s, turn the agent's off: --disable=%s (docs/deploy.md, \"Beside Koordinator\")",
                    cap.value, seen, COUNTERPART[cap], cap.value)

    # -- inputs -----------------------------------------------------------------------------------
    def _cluster(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]], dict[str, Any] | None]:
        if self.state is None:
            return None, [], None
        ns, name = self.options.config_map
        return (self.state.node(self.node_name), self.state.pods_on_node(self.node_name),
                self.state.config_map(ns, name))

    def _config(self, cm: dict[str, Any] | None) -> None:
        problem = self.config.update((cm or {}).get("data") if cm is not None else None)
        if problem is None:
            return
        self.metrics.config_errors.inc()
        log.error("slo-controller-config: %s", problem)
        if cm is not None and self.actions is not None and not self.options.dry_run:
            meta = cm.get("metadata") or {}
            self.actions.event({"kind": "ConfigMap", "apiVersion": "v1", "namespace": meta.get("namespace"),
                                "name": meta.get("name"), "uid": meta.get("uid")},
                               CONFIG_EVENT_REASON, problem, CONFIG_EVENT_ACTION)

    # -- the cycle --------------------------------------------------------------------------------
    def cycle(self, now: float | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        at = now
        now = self.clock() if now is None else now
        node, pods, cm = self._cluster()
        views = self._pod_views(pods)
        self._config(cm)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        colocation, watermark = self.config.config.for_node(labels)
        status = (node or {}).get("status") or {}
        out: dict[str, Any] = {"node": self.node_name, "memory": None, "releaseTargetBytes": 0, "evictions": [],
                               "batch": {name: 0 for name in BATCH_RESOURCES}, "batchReason": None,
                               "conditions": [],
                               "cgroupWrites": []}
        self.first_evict_at = None
        if self.actions is not None:
            self.actions.begin_cycle()
        # The eviction decision needs node memory and, only when a threshold acts, the BE pods' memory: both are
        # measured (and the Eviction requests made) before the rest of the node, which a notified cycle would
        # otherwise measure on its way to the request.
        pressure = False
        sample: Sample | None = None
        memory = self._measured(self.collector.node_memory, "no eviction this cycle")
        if memory is not None:
            pressure = self._memory(now, memory, views, status, watermark, out)
            # The CPU counters are stamped when they are read: after the requests, which may have taken a while.
            sample = self._measured(lambda: self.collector.collect(self.clock() if at is None else now),
                                    "no cgroup writes and no new usage figures this cycle")
        if sample is not None:
            self._last_collect_error = None
            out["cgroupWrites"] = self._enforce(sample, node, views, self.config.config.cpu_suppress_for_node(labels))
        out["batch"] = self._batch(now, sample, node, views, status, colocation, cm is not None)
        out["batchReason"] = self.batch_reason
        out["conditions"] = [self._condition(node, pressure)]
        out["capabilitiesOff"] = {**{c.value: "disabled" for c in sorted(self.options.disabled)},
                                  **{c.value: f"another writer: {seen}" for c, seen in self.yielded.items()}}
        if self.actions is not None:
            self.actions.flush_events()   # repeats folded into a series, once the node's own work is done
        self.metrics.cycle.observe(time.perf_counter() - started)
        return out

    def _pod_views(self, pods: list[dict[str, Any]]) -> list[PodView]:
        """Each pod's view, reused while the object is the same; only this cycle's pods are remembered."""
        if pods is self._views_of:               # the state has not changed since
            return self._view_list
        known, views = self._views, {}
        for pod in pods:
            view = known.get(id(pod))
            if view is None or view.obj is not pod:
                view = pod_view(pod)
            views[id(pod)] = view
        self._views, self._views_of, self._view_list = views, pods, list(views.values())
        return self._view_list

    def _measured(self, measure: Callable[[], T], consequence: str) -> T | None:
        try:
            return measure()
        except CollectError as exc:
            if str(exc) != self._last_collect_error:
                log.error("cannot measure the node, %s: %s", consequence, exc)
                self._last_collect_error = str(exc)
            return None

    def _memory(self, now: float, memory: tuple[int, int], views: list[PodView], status: dict[str, Any],
                watermark: Any, out: dict[str, Any]) -> bool:
        total, available = memory
        cap_q = _quantity((status.get("capacity") or {}).get(MEMORY))
        capacity = int_value(cap_q) if cap_q is not None and cap_q > 0 else total
        used = used_memory(total, available)
        obs = {MEMORY_AVAILABLE: Observation(capacity - used, capacity)}
        out["memory"] = {"capacityBytes": capacity, "usedBytes": used,
                         "usagePercent": round(used * 100 / capacity, 2) if capacity else 0.0}
        self.metrics.memory_ratio.labels(self.node_name).set(used / capacity if capacity else 0.0)
        thresholds = list(self.options.thresholds) if self.on(Capability.KUBELET_EVICTION) else []
        if watermark.enable and self.on(Capability.MEMORY_EVICTION):
            thresholds.insert(0, watermark_threshold(watermark.memoryEvictThresholdPercent,
                                                     watermark.memoryEvictLowerPercent))
        self.trigger_level, self.capacity, self.seen_used = trigger_level(thresholds, capacity), capacity, used
        result = evaluate(thresholds, obs, self.engine, now, self.options.transition_period)
        self.engine = result.state
        tasks = []
        if result.acting:  # candidates are only worth measuring and ranking when a threshold acts
            be = [v for v in views if v.be]
            usage = self.collector.pod_memory(now, [v.uid for v in be])
            requests = {id(v.obj): v.memory_request for v in be}
            cands = candidates([v.obj for v in be], usage, lambda _, p: requests[id(p)])
            tasks = build_tasks(result.acting, obs, cands, self.node_name)
        out["releaseTargetBytes"] = max((t.need for t in tasks), default=0)
        if tasks and not self.memory.in_cooldown(now):
            victims, self.memory = select_victims(tasks, self.memory, now, self._try_evict)
            out["evictions"] = [{"namespace": v.candidate.namespace, "name": v.candidate.name,
                                 "uid": v.candidate.uid, "priority": v.candidate.priority,
                                 "usageBytes": v.candidate.usage, "reason": v.reason} for v in victims]
        elif tasks:
            log.debug("memory eviction in cooldown until %.1f", (self.memory.last_evict_time or 0) + 4)
        return result.pressure

    def _try_evict(self, v: Victim) -> bool:
        c = v.candidate
        if self.options.dry_run:
            log.info("dry-run: would evict %s/%s (uid %s, priority %s, usage %d bytes), reason %s, need %d: %s",
                     c.namespace, c.name, c.uid, c.priority, c.usage, v.reason, v.need, v.message)
            return True
        if self.actions is None:
            return True  # planning only (``once``)
        if self.first_evict_at is None:
            self.first_evict_at = time.monotonic()
        result = self.actions.evict(c.namespace, c.name, c.uid)
        pod = {"kind": "Pod", "apiVersion": "v1", "namespace": c.namespace, "name": c.name, "uid": c.uid}
        if result.outcome is not EvictOutcome.EVICTED:
            log.warning("eviction of %s/%s %s (%s): %s", c.namespace, c.name, result.outcome.value,
                        result.code, result.message)
            self.metrics.eviction_failures.labels(v.reason, result.outcome.value).inc()
            if result.outcome is not EvictOutcome.GONE:   # no Event about a pod that is not there
                self.actions.event(pod, EVENT_REASON_FAIL, f"{v.message}, error {result.message or result.outcome}",
                                   EVENT_ACTION)
            return False
        log.info("evicted %s/%s (usage %d bytes), reason %s, need %d", c.namespace, c.name, c.usage,
                 v.reason, v.need)
        self.metrics.evictions.labels(v.reason).inc()
        reason = EVENT_REASON_SUCCESS if v.reason == EVICT_BY_NODE_MEMORY_USAGE else v.reason
        self.actions.event(pod, reason, v.message, EVENT_ACTION)
        return True

    # -- cgroups: BE limits and BE suppression ----------------------------------------------------------
    def _files(self, layout: Layout) -> CgroupFiles:
        if self._cgroups is None or self._cgroups.layout != layout:
            if self._cgroups is not None:
                self._cgroups.close()
            self._cgroups = CgroupFiles(layout, self.metrics)
        return self._cgroups

    def _enforce(self, sample: Sample, node: dict[str, Any] | None, views: list[PodView],
                 cfg: CPUSuppress) -> list[dict[str, str]]:
        """Plan (and in ``run``, make) this cycle's cgroup writes; returns them as ``once`` prints them."""
        limits, suppression = self.on(Capability.BE_CGROUP_LIMITS), self.on(Capability.CPU_SUPPRESS)
        if sample.layout is None or not (limits or suppression):
            return []
        files = self._files(sample.layout)
        now = sample.time
        under: list[Folder] = []
        roots: list[Folder] = []
        if limits:
            under, elsewhere = files.pod_folders([v.obj for v in views if v.be], sample.pod_folders, now)
            roots = list(elsewhere)
        be = files.besteffort(now)
        target = None
        if be is not None:
            path, current = be
            if suppression:
                target = self._suppress_target(sample, node, views, cfg, current)
            roots.insert(0, Folder(path, None, current, quota=target, children=tuple(under)))
        else:
            roots[:0] = under
        if files.changed or target is not None or self._planned:
            writes = plan_writes(sample.layout.version, roots, files.page_size)
        else:
            writes = []        # nothing read anew, nothing asked differently: last cycle's empty plan stands
        writes = self._not_fighting(writes, be[0] if be is not None else None, roots)
        self._planned = bool(writes)
        applied: set[tuple[str, str]] = set()
        if writes and self.options.dry_run:
            for w in writes:
                log.info("dry-run: would write %s/%s = %s", w.path, w.file, w.value)
        elif writes and self.options.enforce:
            applied = {(r.write.path, r.write.file) for r in files.apply(writes) if r.applied}
            self._applied.update({(w.path, w.file): w.value for w in writes if (w.path, w.file) in applied})
        if be is not None and suppression:
            self._suppressed(be[0], be[1], target, writes, applied, cfg)
        return [w.as_dict() for w in writes]

    def _not_fighting(self, writes: list[CgroupWrite], besteffort: str | None,
                      roots: list[Folder]) -> list[CgroupWrite]:
        """This cycle's writes less those of a capability another writer has taken over (noticed now, or
        before); the values remembered as written shrink to the folders still there."""
        def capability(w: CgroupWrite) -> Capability:
            return Capability.CPU_SUPPRESS if w.path == besteffort else Capability.BE_CGROUP_LIMITS

        for w in rewrites(writes, self._applied):
            cap = capability(w)
            if cap not in self.yielded:
                self._yield(cap, f"{w.path}/{w.file} no longer holds the {w.value} the agent wrote")
        present = set(_folder_paths(roots))
        self._applied = {k: v for k, v in self._applied.items() if k[0] in present}
        return [w for w in writes if self.on(capability(w))]

    def _suppressed(self, path: str, current: Current, target: int | None, writes: list[CgroupWrite],
                    applied: set[tuple[str, str]], cfg: CPUSuppress) -> None:
        """Record the besteffort quota now in force (metric) and whether the quota has been recovered."""
        wrote = any(w.path == path for w in writes)
        done = not wrote or self.options.dry_run or all((w.path, w.file) in applied for w in writes if w.path == path)
        in_force = target if (target is not None and wrote and done) else current.quota
        if target == UNLIMITED and done:
            self._suppress_recovered = True
        labels = (self.node_name, suppress.CFS_QUOTA_POLICY)
        if cfg.enable and cfg.cpuSuppressPolicy == suppress.CFS_QUOTA_POLICY and in_force is not None:
            cores = -1.0 if in_force == UNLIMITED else in_force / (current.period or DEFAULT_CFS_PERIOD)
            self.metrics.suppress_cores.labels(*labels).set(cores)

    def _suppress_target(self, sample: Sample, node: dict[str, Any] | None, views: list[PodView],
                         cfg: CPUSuppress, current: Current) -> int | None:
        """The besteffort folder's quota to write this cycle (µs, or UNLIMITED to recover), None to leave it."""
        if current.quota is None:
            return None
        if not (cfg.enable and cfg.cpuSuppressPolicy == suppress.CFS_QUOTA_POLICY):
            if cfg.enable and not self._cpuset_warned:
                log.info("cpuSuppressPolicy %s is not implemented: BE CPU is not suppressed (cfsQuota is)",
                            cfg.cpuSuppressPolicy)
                self._cpuset_warned = True
            if self._suppress_recovered or current.quota == UNLIMITED:
                self._suppress_recovered = True
                return None
            return UNLIMITED
        self._suppress_recovered = False
        if sample.node_cpu_milli is None:
            return None  # CPU is a rate: the first cycle has none
        status = (node or {}).get("status") or {}
        cap_q = _quantity((status.get("capacity") or {}).get(CPU))
        capacity = milli_value(cap_q) if cap_q is not None and cap_q > 0 else sample.num_cpus * 1000
        be_uids = {v.uid for v in views if v.besteffort}
        used = [(uid in be_uids, p.cpu_milli) for uid, p in sample.pods.items() if p.cpu_milli is not None]
        result = suppress.suppress_milli(capacity, cfg.cpuSuppressThresholdPercent, cfg.cpuSuppressMinPercent,
                                         sample.node_cpu_milli, used, suppress.node_reserved_milli(node))
        log.debug("%s", result.explain)
        self.metrics.suppress_ls_used.labels(self.node_name).set(result.non_be_milli / 1000)
        period = current.period or DEFAULT_CFS_PERIOD
        return suppress.next_be_quota(suppress.be_quota(result.milli, period), current.quota,
                                      suppress.capacity_cores(capacity), period)

    def _batch(self, now: float, sample: Sample | None, node: dict[str, Any] | None, views: list[PodView],
               status: dict[str, Any], colo: Any, config_found: bool) -> dict[str, int]:
        self.batch_reason = None
        if not self.on(Capability.BATCH_RESOURCES):
            return {}
        self.window.seconds = colo.metricAggregateDurationSeconds
        if sample is not None:
            values: dict[str, tuple[float | None, int | None]] = {"": (sample.node_cpu_milli, sample.mem_used)}
            values.update(sample.pods)
            self.window.add(now, values)
        else:
            self.window.expire(now)
        wanted: dict[str, int] | None = None
        zero = {name: 0 for name in BATCH_RESOURCES}
        cm_ns, cm_name = self.options.config_map
        why = batchcalc.withheld(colo.enable, f"{cm_ns}/{cm_name}" if config_found else None, self.window.last_time,
                                 now, colo.degradeTimeMinutes)
        computed = None
        if why is None:
            computed = self._compute_batch(sample, status, views, colo)
            wanted = result = computed.resources()
        else:
            if colo.enable:
                log.warning("%s: withdrawing batch resources", why)
            result = zero
        self.batch_reason = batchcalc.zero_reason(why, computed, self.node_name if node is None else None)
        for name, value in result.items():
            self.metrics.allocatable.labels(node=self.node_name, resource=name, unit=UNITS[name]).set(value)
        self._publish(now, node, status, wanted, colo)
        return result

    def _compute_batch(self, sample: Sample | None, status: dict[str, Any], views: list[PodView],
                       colo: Any) -> batchcalc.BatchResult:
        alloc = status.get("allocatable") or {}
        cpu_q, mem_q = _quantity(alloc.get(CPU)), _quantity(alloc.get(MEMORY))
        # Without a node object (``once`` on this machine), the machine is the node.
        alloc_cpu = milli_value(cpu_q) if cpu_q is not None else (sample.num_cpus * 1000 if sample else 0)
        alloc_mem = int_value(mem_q) if mem_q is not None else (sample.mem_total if sample else 0)
        node_cpu, node_mem = self.window.average("")
        average = self.window.average
        loads = [batchcalc.PodLoad(v.be, *average(v.uid), v.cpu_request_milli, v.memory_request,
                                   v.overhead_cpu_milli, v.overhead_memory)
                 for v in views if not v.finished]
        result = batchcalc.batch_allocatable(alloc_cpu, alloc_mem, node_cpu or 0.0, node_mem or 0.0, loads,
                                             colo.cpuReclaimThresholdPercent, colo.memoryReclaimThresholdPercent,
                                             colo.memoryCalculatePolicy)
        for line in result.explain:
            log.debug("%s", line)
        return result

    def _publish(self, now: float, node: dict[str, Any] | None, status: dict[str, Any],
                 wanted: dict[str, int] | None, colo: Any) -> None:
        if node is None or (self.actions is None and not self.options.dry_run):
            return
        current = batchcalc.published(status.get("allocatable"))
        if node_status_overwritten(self._batch_seen, current, self._batch_written):
            self._yield(Capability.BATCH_RESOURCES, f"node {self.node_name} status now has {current or 'none'}, "
                                                    f"the agent wrote {self._batch_written[-1] or 'none'}")
            return
        self._batch_seen = current
        if not batchcalc.needs_update(current, wanted, self.last_batch_update, now, colo.resourceDiffThreshold,
                                      colo.updateTimeThresholdSeconds):
            return
        body = batchcalc.status_patch(wanted)
        if self.options.dry_run:
            log.info("dry-run: would patch node %s status with %s", self.node_name, body)
            self.last_batch_update = now
        elif self.actions is not None and self.actions.patch_node_status(body):
            log.info("published batch resources on %s: %s", self.node_name, wanted or "removed")
            self.last_batch_update = now
            self._batch_written = [*self._batch_written[-(WRITES_REMEMBERED - 1):], dict(wanted or {})]

    def _condition(self, node: dict[str, Any] | None, pressure: bool) -> dict[str, str]:
        self.metrics.pressure.labels(self.node_name).set(1 if pressure else 0)
        if not (self.on(Capability.MEMORY_EVICTION) or self.on(Capability.KUBELET_EVICTION)):
            cond = {"type": PRESSURE_CONDITION, "status": "Unknown", "reason": EVICTION_DISABLED_REASON,
                    "message": f"{Capability.MEMORY_EVICTION} and {Capability.KUBELET_EVICTION} are disabled: the "
                               "agent handles no BE memory pressure"}
        elif pressure:
            observed = [t.describe() for t in self.engine.first_observed]
            message = ("memory threshold met: " + ", ".join(observed) if observed else
                       f"memory threshold met within the last {self.options.transition_period:g}s transition period")
            cond = {"type": PRESSURE_CONDITION, "status": "True", "reason": PRESSURE_REASON, "message": message}
        else:
            cond = {"type": PRESSURE_CONDITION, "status": "False", "reason": NO_PRESSURE_REASON,
                    "message": "no memory threshold met"}
        if node is not None and (self.actions is not None or self.options.dry_run):
            self._patch_condition(node, cond)
        return cond

    def _patch_condition(self, node: dict[str, Any], cond: dict[str, str]) -> None:
        on_node = next((c for c in ((node.get("status") or {}).get("conditions") or [])
                        if c.get("type") == PRESSURE_CONDITION), None)
        known = self.last_condition if self.last_condition is not None else (on_node or {}).get("status")
        if known == cond["status"] or (known is None and cond["reason"] == EVICTION_DISABLED_REASON):
            return
        stamp = _wall()
        body = {"status": {"conditions": [{**cond, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}
        if self.options.dry_run:
            log.info("dry-run: would set node condition %s=%s (%s)", PRESSURE_CONDITION, cond["status"],
                     cond["message"])
            self.last_condition = cond["status"]
        elif self.actions is not None and self.actions.patch_node_status(body):
            self.last_condition = cond["status"]


def _folder_paths(folders: list[Folder] | tuple[Folder, ...]) -> Iterator[str]:
    for f in folders:
        yield from (p for p in (f.cpu_path, f.memory_path) if p is not None)
        yield from _folder_paths(f.children)


def run_loop(agent: Agent, interval: float, stop: threading.Event, watch: MemoryWatch | None = None,
             health: Health | None = None) -> None:
    """Cycle every ``interval`` seconds until ``stop``, sooner when ``watch`` reports memory moving.

    A failing cycle is logged, never fatal. The reaction latency (notification to first eviction request)
    is recorded per source.
    """
    source: str | None = None
    while not stop.is_set():
        started = time.monotonic()
        try:
            agent.cycle()
            if health is not None:
                health.cycle_done()
            agent.metrics.last_cycle.set(time.time())
        except Exception:  # a bug in one cycle must not take the node's protection down
            log.exception("agent cycle failed")
        if source is not None and watch is not None and watch.fired_at is not None \
                and agent.first_evict_at is not None:
            latency = agent.first_evict_at - watch.fired_at
            agent.metrics.reaction.labels(source).observe(latency)
            log.info("memory notification (%s) to eviction request: %.1f ms (notified at monotonic %.6f)", source,
                     latency * 1000, watch.fired_at)
        remaining = max(0.0, interval - (time.monotonic() - started))
        if watch is None:
            stop.wait(remaining)
            source = None
            continue
        try:
            source = watch.arm(agent.trigger_level, agent.capacity, agent.seen_used)
            if source is None:
                source = watch.wait(remaining)
        except Exception:  # the notifications only bring the cycle forward: without them it still runs
            log.exception("memory notification failed; waiting for the next cycle")
            source = None
            stop.wait(remaining)
        if source == WAKE:
            source = None
