"""Agent benchmark: one-cycle CPU time, resident memory after many cycles, reaction latency.

    PYTHONPATH=. python bench/agent.py [--cycles 10000] [--trials 5]

Builds cgroup v2 (systemd) trees with 10/100/250 pods and a matching in-memory cluster state, then
prints figures (targets: <= 20 ms CPU per cycle at 250 pods, <= 80 MB RSS after 10 000 cycles,
reaction <= interval + 50 ms from the threshold-crossing sample to the eviction request).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agent_trees import FakePod, write_cgroup_v2, write_proc
from tests.apiserver import ReplayAPIServer
from webhook.agent.agent import Agent, AgentOptions, run_loop
from webhook.agent.collectors import Collector
from webhook.cluster.state import AGENT_KINDS, ClusterState

GI, MI = 2**30, 2**20
NODE = "bench-node"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(root: Path, n: int, used: int = 16 * GI) -> tuple[Path, Path, ClusterState, list[FakePod]]:
    pods, objs = [], []
    for i in range(n):
        uid = f"00000000-0000-4000-8000-{i:012d}"
        be = i % 2 == 0
        pods.append(FakePod(uid, "besteffort" if be else "burstable", 64 * MI + i * MI, 8 * MI, i * 1000))
        labels = {"koordinator.sh/qosClass": "BE" if be else "LS"}
        res = ({"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}} if be
               else {"requests": {"cpu": "250m", "memory": "256Mi"}})
        objs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"pod-{i}", "namespace": "bench", "uid": uid, "labels": labels},
                     "spec": {"nodeName": NODE, "priority": 5000 if be else 9000,
                              "containers": [{"name": "c", "resources": res}]},
                     "status": {"phase": "Running"}})
    proc = write_proc(root / "proc", 64 * GI, 64 * GI - used)
    cg = write_cgroup_v2(root / "cgroup", pods)
    state = ClusterState(AGENT_KINDS)
    cm_data = {"colocation-config": json.dumps({"enable": True}),
               "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True}})}
    state.replace_all({
        "Node": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}},
                  "status": {"capacity": {"cpu": "32", "memory": "64Gi"},
                             "allocatable": {"cpu": "32", "memory": "64Gi"}}}],
        "Pod": objs,
        "ConfigMap": [{"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                       "data": cm_data}],
    })
    return proc, cg, state, pods


def cycle_cpu(n: int, repeats: int = 200) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, cg, state, _ = build(Path(tmp), n)
        agent = Agent(AgentOptions(NODE), Collector(proc, cg), state)
        for i in range(20):
            agent.cycle(now=float(i))
        times = []
        for i in range(repeats):
            t0 = time.process_time()
            agent.cycle(now=20.0 + i)
            times.append(time.process_time() - t0)
        times.sort()
        return sum(times) / len(times) * 1000, times[int(len(times) * 0.99) - 1] * 1000


def memory_after(cycles: int, n: int = 250) -> tuple[float, float]:
    import kubernetes.client  # noqa: F401  (the running agent has it loaded)

    with tempfile.TemporaryDirectory() as tmp:
        proc, cg, state, _ = build(Path(tmp), n)
        agent = Agent(AgentOptions(NODE), Collector(proc, cg), state)
        agent.cycle(now=0.0)
        before = _rss_mb()
        for i in range(1, cycles + 1):
            agent.cycle(now=float(i))
        return before, _rss_mb()


def reaction(trials: int, interval: float = 1.0, n: int = 100) -> tuple[list[float], list[float]]:
    from kubernetes import client

    from webhook.agent.actions import KubeActions

    out: list[float] = []
    from_sample: list[float] = []
    for trial in range(trials):
        with tempfile.TemporaryDirectory() as tmp, ReplayAPIServer() as srv:
            proc, cg, state, _pods = build(Path(tmp), n, used=8 * GI)
            for i in range(0, n, 2):
                srv.add_json("POST", f"/api/v1/namespaces/bench/pods/pod-{i}/eviction",
                             {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                             status=201)
            srv.add_json("POST", "/api/v1/namespaces/bench/events", {"kind": "Event"}, status=201)
            srv.add_json("PATCH", f"/api/v1/nodes/{NODE}/status", {"kind": "Node"})
            actions = KubeActions(client.ApiClient(client.Configuration(host=srv.url)), NODE)
            collector = Collector(proc, cg)
            samples: list[float] = []
            real_collect = collector.collect

            def timed_collect(now: float, _real=real_collect, _samples=samples):  # type: ignore[no-untyped-def]
                _samples.append(time.monotonic())
                return _real(now)

            collector.collect = timed_collect  # type: ignore[method-assign]
            agent = Agent(AgentOptions(NODE), collector, state, actions)
            stop = threading.Event()
            thread = threading.Thread(target=run_loop, args=(agent, interval, stop), daemon=True)
            thread.start()
            time.sleep(interval * 1.5 + random.random() * interval)
            write_proc(proc, 64 * GI, 64 * GI - 48 * GI)          # 75% used: over the 70% watermark
            crossed = time.monotonic()
            while not any(r.path.endswith("/eviction") for r in srv.received):
                if time.monotonic() - crossed > 5 * interval:
                    break
                time.sleep(0.0005)
            seen = time.monotonic()
            out.append((seen - crossed) * 1000)
            first = next((t for t in samples if t >= crossed), seen)
            from_sample.append((seen - first) * 1000)
            stop.set()
            thread.join(timeout=5)
        print(f"  trial {trial + 1}: write -> request {out[-1]:.1f} ms, crossing sample -> request "
              f"{from_sample[-1]:.1f} ms", flush=True)
    return out, from_sample


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=10000)
    p.add_argument("--trials", type=int, default=5)
    args = p.parse_args()
    print("one cycle, CPU time (collect + decide, cgroup v2 systemd tree):")
    for n in (10, 100, 250):
        mean, p99 = cycle_cpu(n)
        print(f"  {n:>3} pods: mean {mean:.2f} ms, p99 {p99:.2f} ms   (target <= 20 ms at 250)", flush=True)
    before, after = memory_after(args.cycles)
    print(f"resident memory, 250 pods: {before:.1f} MB after 1 cycle, {after:.1f} MB after {args.cycles} cycles"
          "   (target <= 80 MB)", flush=True)
    print("reaction, threshold-crossing write -> eviction request (interval 1 s):")
    lat, from_sample = reaction(args.trials)
    print(f"  write -> request: max {max(lat):.1f} ms, mean {sum(lat) / len(lat):.1f} ms   (target <= 1050 ms)")
    print(f"  crossing sample -> request: max {max(from_sample):.1f} ms, mean "
          f"{sum(from_sample) / len(from_sample):.1f} ms")


if __name__ == "__main__":
    main()
