"""The live cache's freshness as Prometheus families, computed at scrape time, for both programs' ``/metrics``:

- ``<prefix>_cache_age_seconds{kind}``: seconds since the kind's cache was last known current: its last list,
  watch event or bookmark, or the API server opening a watch from the resourceVersion it holds (whatever came
  after is sent at once) or ending one at its timeout. A healthy kind stays under the watch's timeout (45-59 s);
  one whose watch went silent or whose API server is unreachable grows without bound.
- ``<prefix>_cache_last_sync_timestamp_seconds{kind}``: when the kind was last listed whole (Unix time): its first
  sync, a relist after 410 Gone or after a silent watch.

Only kinds a live source keeps have samples: a folder (``--cluster-state``) is the truth it holds, with no age.
"""

from __future__ import annotations

import time

from prometheus_client.core import GaugeMetricFamily, Metric

from webhook.cluster.state import ClusterState


def cache_families(state: ClusterState, prefix: str) -> list[Metric]:
    age = GaugeMetricFamily(f"{prefix}_cache_age_seconds", "Seconds since the kind's cache was last known current "
                            "(its last list, watch event or bookmark, or a watch the API server opened or ended)",
                            labels=["kind"])
    synced = GaugeMetricFamily(f"{prefix}_cache_last_sync_timestamp_seconds",
                               "When the kind was last listed whole (Unix time)", labels=["kind"])
    for kind, seconds in state.ages(time.monotonic()).items():
        age.add_metric([kind], seconds)
    for kind, at in state.listed_at().items():
        synced.add_metric([kind], at)
    return [age, synced]


class CacheCollector:
    """``cache_families`` as a prometheus_client collector."""

    def __init__(self, state: ClusterState, prefix: str) -> None:
        self.state, self.prefix = state, prefix

    def collect(self) -> list[Metric]:
        return cache_families(self.state, self.prefix)
