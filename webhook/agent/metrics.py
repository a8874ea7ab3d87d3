"""Prometheus metrics, with koordlet's names and labels where koordlet has one: counters and gauges in memory, which
the capabilities update as they decide and act (no I/O; ``webhook.agent.edges.metrics_server`` serves them)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.cluster.cache_metrics import CacheCollector
from webhook.cluster.state import ClusterState

NOTIFICATION_SOURCES = ("memcg-threshold", "psi", "memory-events", "sampler")
# koordlet's units for koordlet_node_resource_allocatable (batch-cpu and mid-cpu are integer counts of milli-cores;
# pkg/koordlet/metrics/resource_summary.go, recorded for both tiers by its statesinformer).
UNITS = {"kubernetes.io/batch-cpu": "integer", "kubernetes.io/batch-memory": "byte",
         "kubernetes.io/mid-cpu": "integer", "kubernetes.io/mid-memory": "byte"}


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._cache: CacheCollector | None = None
        self.allocatable = Gauge("koordlet_node_resource_allocatable", "Batch and mid resources published on the node",
                                 ["node", "resource", "unit"], registry=r)
        self.evictions = Counter("colocation_agent_evictions_total", "Pods evicted, by reason",
                                 ["reason"], registry=r)
        self.eviction_failures = Counter("colocation_agent_eviction_failures_total",
                                         "Eviction requests refused or failed, by reason and outcome",
                                         ["reason", "outcome"], registry=r)
        self.memory_ratio = Gauge("colocation_agent_node_memory_usage_ratio",
                                  "Node memory used (MemTotal - MemAvailable) over capacity", ["node"], registry=r)
        self.pressure = Gauge("colocation_agent_be_memory_pressure", "1 while the node carries BEMemoryPressure",
                              ["node"], registry=r)
        self.cycle = Histogram("colocation_agent_cycle_duration_seconds", "One measure-decide-act cycle",
                               buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
                               registry=r)
        self.config_errors = Counter("colocation_agent_config_errors_total",
                                     "slo-controller-config problems seen (the last good config is kept)",
                                     registry=r)
        self.config_unknown_keys = Gauge("colocation_agent_config_unknown_keys",
                                         "Keys of slo-controller-config no Koordinator struct defines there (most "
                                         "likely misspelt; ignored), by section", ["section"], registry=r)
        self.cgroup_writes = Counter("colocation_agent_cgroup_writes_total",
                                     "cgroup files written (BE limits, BE suppression), by file", ["file"], registry=r)
        self.cgroup_last_write = Gauge("colocation_agent_cgroup_last_write_timestamp_seconds",
                                       "When a file of this name was last written (Unix time)", ["file"], registry=r)
        self.cgroup_refusals = Counter("colocation_agent_cgroup_write_refusals_total",
                                       "cgroup writes the kernel refused (retried next cycle), by file and errno",
                                       ["file", "errno"], registry=r)
        self.suppress_cores = Gauge("koordlet_be_suppress_cpu_cores",
                                    "CPU cores the besteffort cgroup may use (BE suppression) as written",
                                    ["node", "type"], registry=r)
        self.suppress_ls_used = Gauge("koordlet_be_suppress_ls_used_cpu_cores",
                                      "CPU cores used by non-BE pods, as the suppression counted them", ["node"],
                                      registry=r)
        self.notification_source = Gauge("colocation_agent_memory_notification_source",
                                         "1 for each memory notification source in use", ["source"], registry=r)
        self.notifications = Counter("colocation_agent_memory_notifications_total",
                                     "Memory notifications that brought a cycle forward", ["source"], registry=r)
        self.reaction = Histogram("colocation_agent_memory_reaction_seconds",
                                  "From a memory notification to the first eviction request it caused",
                                  ["source"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.25, 0.5,
                                                       1.0, 2.5), registry=r)
        self.capability = Gauge("colocation_agent_capability_enabled",
                                "1 for each capability the agent runs; 0 when turned off (--disable) or left to "
                                "another writer", ["capability"], registry=r)
        self.other_writer = Gauge("colocation_agent_other_writer",
                                  "1 once another writer changed what this capability writes; the agent stopped "
                                  "writing it", ["capability"], registry=r)
        self.last_cycle = Gauge("colocation_agent_last_cycle_timestamp_seconds",
                                "When the last complete cycle ended (Unix time)", registry=r)


    def watch_cache(self, state: ClusterState) -> None:
        """Export the age of ``state``'s cache (its live source's kinds: ``colocation_agent_cache_age_seconds``,
        ``colocation_agent_cache_last_sync_timestamp_seconds``)."""
        if self._cache is None:
            self._cache = CacheCollector(state, "colocation_agent")
            self.registry.register(self._cache)
