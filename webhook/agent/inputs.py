"""What a cycle reads of the cluster: the node, its pods (each seen through a ``PodView``), and the
slo-controller-config in force for the node."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from webhook.agent.domain.cgroup_limits import sandbox_overhead
from webhook.agent.domain.cpu_eviction import CPUEvictConfig
from webhook.agent.domain.slo_config import (
    COLOCATION_KEY,
    DATA,
    THRESHOLD_KEY,
    Colocation,
    ConfigTracker,
    CPUSuppress,
    KeyNotice,
    MemoryEvict,
)
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cluster.state import ClusterState
from webhook.core.qos import is_be, is_terminal, kube_qos_class, priority_class_with_default
from webhook.core.quantity import QuantityError, int_value, milli_value, parse_quantity
from webhook.core.resources import BATCH_CPU, BATCH_MEMORY, CPU, MEMORY, MID_CPU, MID_MEMORY, pod_requests

if TYPE_CHECKING:   # an edge: the type only, so that the capabilities, which read Inputs, load no edge
    from webhook.agent.edges.actions import KubeActions

log = logging.getLogger("colocation-agent")
CONFIG_EVENT_REASON, CONFIG_EVENT_ACTION = "ColocationCfgInvalid", "LoadConfig"


def quantity(raw: Any) -> Decimal | None:
    """A node status quantity, None when absent or not one (the node's own figures are then measured)."""
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
    batch_cpu_request: int = 0       # kubernetes.io/batch-cpu and -memory requested, as the kubelet admits them
    batch_memory_request: int = 0
    mid_cpu_request: int = 0         # kubernetes.io/mid-cpu and -memory requested, as the kubelet admits them
    mid_memory_request: int = 0
    priority_class: str = ""         # Koordinator's, with its default (mid_allocatable)
    running_or_pending: bool = False


def pod_view(pod: dict[str, Any]) -> PodView:
    be = is_be(pod)
    req = pod_requests(pod)
    overhead = sandbox_overhead(pod) if be and (pod.get("spec") or {}).get("overhead") else {}
    return PodView(pod, (pod.get("metadata") or {}).get("uid") or "", be,
                   be or kube_qos_class(pod) == "BestEffort",
                   is_terminal(pod),
                   milli_value(req[CPU]) if CPU in req else 0, int_value(req[MEMORY]) if MEMORY in req else 0,
                   int(overhead.get(BATCH_CPU, 0)), int(overhead.get(BATCH_MEMORY, 0)),
                   int_value(req[BATCH_CPU]) if BATCH_CPU in req else 0,
                   int_value(req[BATCH_MEMORY]) if BATCH_MEMORY in req else 0,
                   int_value(req[MID_CPU]) if MID_CPU in req else 0,
                   int_value(req[MID_MEMORY]) if MID_MEMORY in req else 0,
                   priority_class_with_default(pod),
                   (pod.get("status") or {}).get("phase") in ("Running", "Pending"))


@dataclass(frozen=True, slots=True)
class Inputs:
    """One cycle's view of the cluster (no cluster state: no node, no pods, the default config)."""

    node: dict[str, Any] | None
    pods: list[PodView]
    config_found: bool             # the slo-controller-config ConfigMap exists
    colocation: Colocation
    memory_evict: MemoryEvict
    cpu_suppress: CPUSuppress
    cpu_evict: CPUEvictConfig = field(default_factory=CPUEvictConfig)
    config_error: str | None = None              # why the ConfigMap is not in force (the last good config is)
    config_notices: tuple[KeyNotice, ...] = ()   # its keys this agent does not use

    @property
    def status(self) -> dict[str, Any]:
        return (self.node or {}).get("status") or {}


class ClusterInputs:
    """Reads the cycle's ``Inputs``; keeps the last good slo-controller-config and each pod object's view."""

    def __init__(self, options: AgentOptions, state: ClusterState | None, actions: KubeActions | None,
                 metrics: AgentMetrics) -> None:
        self.options = options
        self.state = state
        self.actions = actions
        self.metrics = metrics
        self.config = ConfigTracker()
        self._told: tuple[KeyNotice, ...] | None = None   # the notices the unknown-keys gauge counts
        self._views: dict[int, PodView] = {}    # id(pod object) -> its view; the view holds the object
        self._views_of: list[dict[str, Any]] | None = None   # the pod list they were made for
        self._view_list: list[PodView] = []

    def read(self) -> Inputs:
        node, pods, cm = None, [], None
        if self.state is not None:
            ns, name = self.options.config_map
            node_name = self.options.node_name
            node, pods, cm = (self.state.node(node_name), self.state.pods_on_node(node_name),
                              self.state.config_map(ns, name))
        views = self._pod_views(pods)
        self._config(cm)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        colocation, watermark = self.config.config.for_node(labels)
        return Inputs(node, views, cm is not None, colocation, watermark,
                      self.config.config.cpu_suppress_for_node(labels), self.config.config.cpu_evict_for_node(labels),
                      self.config.invalid, self.config.notices)

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

    def _config(self, cm: dict[str, Any] | None) -> None:
        problem = self.config.update((cm or {}).get("data") if cm is not None else None)
        self._notices()
        if problem is None:
            return
        self.metrics.config_errors.inc()
        log.error("slo-controller-config: %s", problem)
        if cm is not None and self.actions is not None and not self.options.dry_run:
            meta = cm.get("metadata") or {}
            self.actions.event({"kind": "ConfigMap", "apiVersion": "v1", "namespace": meta.get("namespace"),
                                "name": meta.get("name"), "uid": meta.get("uid")},
                               CONFIG_EVENT_REASON, problem, CONFIG_EVENT_ACTION)

    def _notices(self) -> None:
        """Each key notice logged once (an unknown key as a warning; one of Koordinator's that the agent does not
        act on at info), and the unknown keys counted by section."""
        for notice in self.config.fresh:
            log.log(logging.INFO if notice.koordinator else logging.WARNING, "slo-controller-config: %s", notice)
        if self.config.notices is self._told:
            return
        self._told = self.config.notices
        for section in (DATA, COLOCATION_KEY, THRESHOLD_KEY):
            self.metrics.config_unknown_keys.labels(section).set(
                sum(1 for n in self._told if n.section == section and not n.koordinator))
