"""Prometheus metrics, with koordlet's names where koordlet has one."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.allocatable = Gauge("koordlet_node_resource_allocatable", "Batch resources published on the node",
                                 ["resource", "node"], registry=r)
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
