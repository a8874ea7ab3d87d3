"""The agent on a real node (harness/real_node.py: kube-apiserver, the scheduler, the controller manager and a
kubelet on containerd and runc; the webhook and the agent as shipped, harness/node_scene.py), at the defaults.

Prints, for docs/benchmarks.md ("The real node"):

- memory eviction of a BE pod really holding memory (tmpfs pages): from the node crossing the watermark to the
  Eviction request (the agent's Event), to the pod's processes killed, to the pod gone from the apiserver;
- cfsQuota suppression: a BE burner's CPU alone, then while an LS pod burns a core, and the LS pod's;
- node status writes per minute by the agent (counted in the apiserver's audit log) and cgroup writes per minute
  (the agent's ``colocation_agent_cgroup_writes_total``), over ``--minutes`` with an LS pod burning steadily;
- the agent's CPU (utime + stime over the same minutes) and resident memory.

    COLOCATION_TEST_NODE=DIR python bench/real_node.py [--minutes 5] [--evictions 3]

Without the parts it says why and exits 0. The node must not run beside the cgroup tests (module docstring of
harness/real_node.py).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import urllib.request
from pathlib import Path

from harness import real_node
from harness.node_scene import (
    AGENT_NS,
    AGENT_SA,
    Scene,
    colocation,
    evict_a_holder,
    suppress_a_burner,
)

# The shipped slo-controller-config's defaults (docs/agent.md), the 10 s window of the run that found the churn,
# and cfsQuota suppression at its default threshold.
COLOCATION = {"enable": True, "metricAggregateDurationSeconds": 10}
THRESHOLDS = {"enable": True, "cpuSuppressPolicy": "cfsQuota", "memoryEvictThresholdPercent": 99}
AGENT_USER = f"system:serviceaccount:{AGENT_NS}:{AGENT_SA}"


def _proc_times(pid: int) -> tuple[float, int]:
    """(utime + stime in seconds, VmRSS in bytes) of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = 100   # USER_HZ on Linux
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = next(int(line.split()[1]) * 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return cpu, rss


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def evictions(scene: Scene, rounds: int) -> None:
    marks = [evict_a_holder(scene, f"be-holder-{i}", COLOCATION, THRESHOLDS) for i in range(rounds)]
    for label, field in (("crossing → Eviction request", "requested"), ("crossing → kubelet stops it", "signalled"),
                         ("crossing → processes killed", "killed"), ("crossing → pod gone", "gone")):
        values = [getattr(m, field) * 1000 for m in marks if getattr(m, field) is not None]
        print(f"{label:30} median {statistics.median(values):8.0f} ms   ({', '.join(f'{v:.0f}' for v in values)})")


def suppression(scene: Scene) -> None:
    got = suppress_a_burner(scene, COLOCATION["metricAggregateDurationSeconds"])
    print(f"BE burner alone               {got.alone:8.2f} cores")
    print(f"BE burner under suppression   {got.under:8.2f} cores   (cpu.cfs_quota_us {got.quota.read_text().strip()})")
    print(f"LS burner meanwhile           {got.ls:8.2f} cores")


def churn(scene: Scene, minutes: float, metrics_port: int) -> None:
    """With both burners still running: the agent's writes and its own cost over ``minutes``."""
    pid = scene.procs["agent"].pid
    start_wall, start = time.time(), time.monotonic()
    cpu0, _ = _proc_times(pid)
    cgroup0 = _metric(metrics_port, "colocation_agent_cgroup_writes_total")
    rss_peak = 0
    while time.monotonic() - start < minutes * 60:
        time.sleep(5)
        rss_peak = max(rss_peak, _proc_times(pid)[1])
    elapsed = time.monotonic() - start
    cpu1, rss = _proc_times(pid)
    cgroup_writes = _metric(metrics_port, "colocation_agent_cgroup_writes_total") - cgroup0
    status = [t for t in scene.node.status_writes(AGENT_USER) if t >= start_wall]
    kubelet = [t for t in scene.node.status_writes(f"system:node:{scene.node.name}") if t >= start_wall]
    per_minute = 60 / elapsed
    print(f"over {elapsed / 60:.1f} min at the defaults (metricReportIntervalSeconds 60, "
          "metricAggregateDurationSeconds 10):")
    print(f"node status writes, agent     {len(status) * per_minute:8.2f} a minute   ({len(status)})")
    print(f"node status writes, kubelet   {len(kubelet) * per_minute:8.2f} a minute   ({len(kubelet)}, for scale)")
    print(f"cgroup writes, agent          {cgroup_writes * per_minute:8.2f} a minute   ({cgroup_writes:.0f})")
    print(f"agent CPU                     {(cpu1 - cpu0) / elapsed * 1000:8.1f} milli-cores")
    print(f"agent resident memory         {rss / 2**20:8.1f} MiB (peak {rss_peak / 2**20:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5, help="how long the writes are counted")
    parser.add_argument("--evictions", type=int, default=3, help="memory evictions timed")
    args = parser.parse_args()
    reason = real_node.skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return
    with real_node.started() as node, colocation(node, COLOCATION, THRESHOLDS) as scene:
        print(f"{node.cluster.version}, node {node.name}")
        evictions(scene, args.evictions)
        suppression(scene)
        churn(scene, args.minutes, scene.metrics_port)


if __name__ == "__main__":
    main()
