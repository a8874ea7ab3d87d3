"""Agent benchmark: cycle CPU, resident memory, idle CPU, and reaction latency on this machine's real kernel.

    PYTHONPATH=. python bench/agent.py [--pods 250] [--trials 10] [--idle-seconds 20] [--cycles 10000]

1. One collect-decide-enforce cycle, CPU time, over generated cgroup v2 trees (10/100/250 pods) and, as root,
   over real cgroup v1 folders (250 pods). Target: <= 20 ms at 250 pods.
2. Resident memory after many cycles (target <= 80 MB).
3. Idle CPU of ``colocation-agent run`` with 250 pods in real cgroups, 1 s interval, memory notifications on
   (target <= 1 % of a core). The node object carries the batch figures the agent publishes, as a live source
   shows it after the first status patch; a files state never shows the patch, so the last figure, without
   them, has a status patch every cycle.
4. Reaction latency on the real kernel: a child process in a BE pod's cgroup allocates past a watermark set just
   above the machine's usage; from the moment ``MemTotal - MemAvailable`` crosses it (the child samples meminfo
   after every MiB) to the Eviction request reaching a local API server, and to the agent issuing it (its own log
   says when it was notified and when it issued the request; CLOCK_MONOTONIC is one clock for all processes).
   ``colocation-agent run`` runs as its own process, as in the DaemonSet, with its memory threshold on the host's
   root memory cgroup (the bench creates /sys/fs/cgroup/memory/kubepods for the run and refuses if one exists).
   Per notification source: memcg threshold (target <= 20 ms), the 100 ms meminfo sampler (target <= 150 ms),
   and none (the 1 s interval alone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.agent_trees import FakePod, write_cgroup_v2, write_proc
from harness.apiserver import ReplayAPIServer
from harness.kernel import (
    RealCgroupRoot,
    allocator_code,
    crossing,
    meminfo_used,
    real_cgroup_root,
    v1_unavailable_reason,
)
from webhook.agent.cycle import Agent
from webhook.agent.edges.collectors import Collector
from webhook.agent.options import AgentOptions
from webhook.cluster.state import AGENT_KINDS, ClusterState

GI, MI = 2**30, 2**20
NODE = "bench-node"
NS = "bench"


def uid(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def cid(i: int) -> str:
    return f"c{i:015d}"


def pod_objects(n: int) -> list[dict[str, Any]]:
    """Half BE pods with batch limits (enforced in their cgroups), half LS pods with native requests."""
    objs = []
    for i in range(n):
        be = i % 2 == 0
        batch = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "4Gi"}
        res = {"limits": batch, "requests": batch} if be else {"requests": {"cpu": "250m", "memory": "256Mi"}}
        objs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"pod-{i}", "namespace": NS, "uid": uid(i),
                                  "labels": {"koordinator.sh/qosClass": "BE" if be else "LS"}},
                     "spec": {"nodeName": NODE, "priority": 5000 if be else 9000,
                              "containers": [{"name": "c", "resources": res}]},
                     "status": {"phase": "Running", "qosClass": "BestEffort" if be else "Burstable",
                                "containerStatuses": [{"name": "c", "containerID": f"containerd://{cid(i)}"}]}})
    return objs


def cluster(n: int, memory: int = 64 * GI, evict_percent: int | None = None,
            batch: dict[str, int] | None = None) -> ClusterState:
    """``batch``: the batch figures the node already carries (as after the agent's first status patch)."""
    state = ClusterState(AGENT_KINDS)
    threshold: dict[str, Any] = {"enable": True, "cpuSuppressPolicy": "cfsQuota"}
    if evict_percent is not None:
        threshold["memoryEvictThresholdPercent"] = evict_percent
    cm_data = {"colocation-config": json.dumps({"enable": True}),
               "resource-threshold-config": json.dumps({"clusterStrategy": threshold})}
    published = {name: str(value) for name, value in (batch or {}).items()}
    state.replace_all({
        "Node": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}},
                  "status": {"capacity": {"cpu": "32", "memory": str(memory), **published},
                             "allocatable": {"cpu": "32", "memory": str(memory), **published}}}],
        "Pod": pod_objects(n),
        "ConfigMap": [{"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                       "data": cm_data}],
    })
    return state


def fake_tree(root: Path, n: int, used: int = 16 * GI) -> tuple[Path, Path]:
    pods = [FakePod(uid(i), "besteffort" if i % 2 == 0 else "burstable", 64 * MI + i * MI, 8 * MI, i * 1000,
                    (f"containerd://{cid(i)}",)) for i in range(n)]
    return write_proc(root / "proc", 64 * GI, 64 * GI - used), write_cgroup_v2(root / "cgroup", pods)


def real_tree(cg: RealCgroupRoot, n: int) -> None:
    for i in range(n):
        cg.mkdir(f"kubepods/{'besteffort' if i % 2 == 0 else 'burstable'}/pod{uid(i)}/{cid(i)}")


def cycle_cpu(agent: Agent, repeats: int = 200) -> tuple[float, float]:
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

    def rss() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    with tempfile.TemporaryDirectory() as tmp:
        proc, cg = fake_tree(Path(tmp), n)
        agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), cluster(n))
        agent.cycle(now=0.0)
        before = rss()
        for i in range(1, cycles + 1):
            agent.cycle(now=float(i))
        return before, rss()


def write_state(folder: Path, n: int, memory: int = 64 * GI, evict_percent: int | None = None,
                batch: dict[str, int] | None = None) -> Path:
    """The cluster state as files, for ``colocation-agent run --cluster-state``."""
    folder.mkdir(parents=True, exist_ok=True)
    state = cluster(n, memory, evict_percent, batch)
    for kind, name in (("Node", "node"), ("ConfigMap", "configmap")):
        (folder / f"{name}.json").write_text(json.dumps(state.objects(kind)[0]))
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "PodList",
                                                  "items": state.objects("Pod")}))
    return folder


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
    return path


class AgentProcess:
    """``colocation-agent run`` as the DaemonSet runs it, against the cgroup root and a local API server."""

    def __init__(self, cg: RealCgroupRoot, state: Path, kube: Path, mode: str, port: int) -> None:
        repo = Path(__file__).resolve().parents[1]
        self.port = port
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webhook.cli.agent", "run", "--node-name", NODE, "--cluster-state", str(state),
             "--kubeconfig", str(kube), "--proc-root", "/proc", "--cgroup-root", str(cg.root), "--interval", "1s",
             "--memory-notification", mode, "--metrics-port", str(port)],
            stderr=subprocess.PIPE, text=True, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True).start()

    def wait_healthy(self, timeout: float = 30.0) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                    if json.loads(r.read())["lastCycleAgeSeconds"] is not None:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the agent did not complete a cycle: " + "".join(self.lines[-5:]))

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def published_batch(cg: RealCgroupRoot, n: int) -> dict[str, int]:
    """What the agent publishes for this machine now (two cycles: CPU is a rate)."""
    agent = Agent(AgentOptions(NODE), Collector(Path("/proc"), cg.root), cluster(n))
    agent.cycle()
    time.sleep(0.5)
    return dict(agent.cycle().batch)


def idle_cpu(cg: RealCgroupRoot, n: int, seconds: float, mode: str, tmp: Path, steady: bool = True) -> float:
    """``steady``: the node object carries the batch figures the agent publishes, as a live source shows it after
    the first status patch; without, the files state never shows the patch and the agent patches every cycle."""
    with ReplayAPIServer() as srv:
        srv.add_json("PATCH", f"/api/v1/nodes/{NODE}/status", {"kind": "Node"})
        state = write_state(tmp / f"idle-{mode}-{steady}", n, batch=published_batch(cg, n) if steady else None)
        agent = AgentProcess(cg, state, kubeconfig(tmp / "kubeconfig", srv.url), mode, free_port())
        try:
            agent.wait_healthy()
            time.sleep(3.0)                           # the first cycles (all the writes) out of the way
            patches = len(srv.received)
            cpu0, wall0 = agent.cpu_seconds(), time.monotonic()
            time.sleep(seconds)
            pct = (agent.cpu_seconds() - cpu0) / (time.monotonic() - wall0) * 100
            if steady and len(srv.received) > patches:
                print(f"  (the machine's usage moved the batch figures: {len(srv.received) - patches} status "
                      "patches while measuring)", flush=True)
            return pct
        finally:
            agent.stop()


Trial = tuple[float, float, float | None, float | None]


def reaction(cg: RealCgroupRoot, n: int, mode: str, trials: int, tmp: Path, margin: int = 192 * MI) -> list[Trial]:
    """Per trial, in ms: crossing -> the request reaching the API server, the same from the last sample under
    the watermark, crossing -> the agent issuing the request, the agent's notification -> issuing it."""
    out: list[Trial] = []
    be_pods = [i for i in range(n) if i % 2 == 0]
    with ReplayAPIServer() as srv:
        for i in be_pods:
            srv.add_json("POST", f"/api/v1/namespaces/{NS}/pods/pod-{i}/eviction",
                         {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, status=201)
        srv.add_json("POST", f"/api/v1/namespaces/{NS}/events", {"kind": "Event"}, status=201)
        srv.add_json("PATCH", f"/api/v1/nodes/{NODE}/status", {"kind": "Node"})
        kube = kubeconfig(tmp / "kubeconfig", srv.url)
        for trial in range(trials):
            target = be_pods[trial % len(be_pods)]
            used0 = meminfo_used()
            capacity = 2 * (used0 + margin)                 # a 50 % watermark just above today's usage
            watermark = capacity // 2
            agent = AgentProcess(cg, write_state(tmp / f"react-{mode}-{trial}", n, capacity, 50), kube, mode,
                                 free_port())
            child = None
            try:
                agent.wait_healthy()
                time.sleep(1.0 + random.random())            # threshold armed; any phase of the 1 s interval
                srv.received.clear()
                child = cg.spawn(f"kubepods/besteffort/pod{uid(target)}/{cid(target)}",
                                 allocator_code(margin + 512 * MI, hold_seconds=5.0), controllers=("memory",))
                deadline = time.monotonic() + 5
                evictions: list[Any] = []
                while time.monotonic() < deadline and not evictions:
                    time.sleep(0.005)                        # the server stamps arrivals itself
                    evictions = [r for r in srv.received if r.path.endswith("/eviction")]
                lines = []
                assert child.stdout is not None
                for line in iter(child.stdout.readline, ""):
                    if line.strip() == "end":
                        break
                    lines.append(line.split())
            finally:
                if child is not None:
                    child.kill()
                    child.communicate()
                agent.stop()
            samples = [(float(t), int(u)) for t, u in lines]
            span = crossing(samples, watermark)
            if not evictions or span is None:
                print(f"  trial {trial + 1}: no crossing or no eviction (machine usage moved); skipped", flush=True)
                continue
            line = next((ln for ln in agent.lines if "memory notification" in ln and "to eviction request" in ln), "")
            own = float(line.split("to eviction request: ")[1].split()[0]) if line else None
            notified = float(line.rsplit("monotonic ", 1)[1].rstrip(")\n")) if line else None
            at = evictions[0].at
            issued = (notified - span[1]) * 1000 + own if own is not None and notified is not None else None
            out.append(((at - span[1]) * 1000, (at - span[0]) * 1000, issued, own))
            inside = (f"; crossing -> notification {(notified - span[1]) * 1000:.1f} ms, notification -> request "
                      f"issued {own:.1f} ms" if own is not None and notified is not None else "")
            print(f"  trial {trial + 1}: crossing -> eviction request {out[-1][0]:.1f} ms "
                  f"(<= {out[-1][1]:.1f} ms from the last sample under the watermark){inside}", flush=True)
            time.sleep(0.3)                                  # the child's memory back before the next trial
    return out


def summary(values: list[float]) -> str:
    if not values:
        return "no trials"
    return (f"max {max(values):.1f} ms, p50 {statistics.median(values):.1f} ms, mean {statistics.fmean(values):.1f} ms "
            f"({len(values)} trials)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pods", type=int, default=250)
    p.add_argument("--cycles", type=int, default=10000)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--idle-seconds", type=float, default=20.0)
    args = p.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))      # three open files per pod
    print("one cycle, CPU time (collect + decide + cgroup reconcile), generated cgroup v2 tree:")
    for n in (10, 100, 250):
        with tempfile.TemporaryDirectory() as tmp:
            proc, tree = fake_tree(Path(tmp), n)
            mean, p99 = cycle_cpu(Agent(AgentOptions(NODE, enforce=True), Collector(proc, tree), cluster(n)))
        print(f"  {n:>3} pods: mean {mean:.2f} ms, p99 {p99:.2f} ms   (target <= 20 ms at 250)", flush=True)
    before, after = memory_after(args.cycles)
    print(f"resident memory, 250 pods: {before:.1f} MB after 1 cycle, {after:.1f} MB after {args.cycles} cycles"
          "   (target <= 80 MB)", flush=True)
    reason = v1_unavailable_reason()
    if reason is not None:
        print(f"real-kernel figures skipped: {reason}")
        return
    print(f"kernel {os.uname().release}; real cgroup v1 folders, {args.pods} pods "
          f"({args.pods // 2 + args.pods % 2} BE with batch limits):", flush=True)
    with real_cgroup_root(memory_at_root=True) as cg, tempfile.TemporaryDirectory() as tmp:
        real_tree(cg, args.pods)
        mean, p99 = cycle_cpu(Agent(AgentOptions(NODE, enforce=True), Collector(Path("/proc"), cg.root),
                                    cluster(args.pods)))
        print(f"  one cycle, CPU time: mean {mean:.2f} ms, p99 {p99:.2f} ms   (target <= 20 ms)", flush=True)
        for mode in ("memcg-threshold", "sampler"):
            pct = idle_cpu(cg, args.pods, args.idle_seconds, mode, Path(tmp))
            print(f"  idle CPU of `colocation-agent run`, 1 s interval, {mode}: {pct:.2f} % of a core over "
                  f"{args.idle_seconds:g} s   (target <= 1 %)", flush=True)
        pct = idle_cpu(cg, args.pods, args.idle_seconds, "memcg-threshold", Path(tmp), steady=False)
        print(f"  the same, memcg-threshold, the node status patched every cycle (a files state never shows the "
              f"patch): {pct:.2f} % of a core", flush=True)
        results = {}
        for mode, trials in (("memcg-threshold", args.trials), ("sampler", args.trials),
                             ("none", max(3, args.trials // 2))):
            print(f"  reaction, {mode}{' (1 s interval only)' if mode == 'none' else ''}:", flush=True)
            results[mode] = reaction(cg, args.pods, mode, trials, Path(tmp))
        print(f"reaction, watermark crossing -> eviction request (real kernel, `colocation-agent run`, "
              f"{args.pods} pods, 1 s interval):")
        targets = {"memcg-threshold": "target <= 20 ms", "sampler": "target <= 150 ms", "none": "koordlet: 1 s poll"}
        for mode, values in results.items():
            print(f"  {mode:>15}: received by the API server {summary([v[0] for v in values])}   ({targets[mode]})")
            print(f"  {'':>15}  conservative (from the last sample under the watermark) "
                  f"{summary([v[1] for v in values])}")
            issued = [v[2] for v in values if v[2] is not None]
            own = [v[3] for v in values if v[3] is not None]
            if issued:
                print(f"  {'':>15}  issued by the agent {summary(issued)}; of which notification -> issued "
                      f"{summary(own)}")

if __name__ == "__main__":
    main()
