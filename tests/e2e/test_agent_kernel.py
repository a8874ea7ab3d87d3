"""The agent on the real kernel: real cgroups (uniquely named, removed afterwards), real child processes.

Runs where the process is root and the cgroup v1 memory, cpu and cpuacct controllers are mounted and writable
(CI here); skips with the reason elsewhere. Latencies are printed, not asserted beyond a generous bound.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.apiserver import ReplayAPIServer
from harness.kernel import (
    RealCgroupRoot,
    allocator_code,
    cpuset_unavailable_reason,
    crossing,
    meminfo_used,
    real_cgroup_root,
    unified_mount,
    unified_unavailable_reason,
    v1_unavailable_reason,
)
from webhook.agent.cycle import Agent
from webhook.agent.domain.cpuset import format_cpu_list, parse_cpu_list
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.collectors import Collector
from webhook.agent.edges.notify import MemoryWatch
from webhook.agent.loop import run_loop
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cluster.state import AGENT_KINDS, ClusterState

V1_REASON = v1_unavailable_reason()
pytestmark = pytest.mark.skipif(V1_REASON is not None, reason=V1_REASON or "")

MI = 2**20
NODE = "kernel-node"
NS = "colo-kernel"
BE_UID, BE_CID = "0a0a0a0a-1111-4222-8333-444444444444", "be0123456789abcdef"
LS_UID, LS_CID = "0b0b0b0b-1111-4222-8333-444444444444", "ls0123456789abcdef"
KBE_UID, KBE_CID = "0c0c0c0c-1111-4222-8333-444444444444", "kb0123456789abcdef"
BE_POD = f"kubepods/besteffort/pod{BE_UID}"
BE_CTR = f"{BE_POD}/{BE_CID}"
LS_CTR = f"kubepods/burstable/pod{LS_UID}/{LS_CID}"
KBE_CTR = f"kubepods/besteffort/pod{KBE_UID}/{KBE_CID}"


@pytest.fixture()
def cg() -> Iterator[RealCgroupRoot]:
    with real_cgroup_root() as root:
        yield root


def pod(name: str, uid: str, cid: str, qos: str | None, resources: dict[str, Any], kube_qos: str) -> dict[str, Any]:
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": labels},
            "spec": {"nodeName": NODE, "priority": 5000, "containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": "Running", "qosClass": kube_qos,
                       "containerStatuses": [{"name": "main", "containerID": f"containerd://{cid}"}]}}


def be_pod(cpu: str = "1k", memory: str = "1Gi") -> dict[str, Any]:
    batch = {"kubernetes.io/batch-cpu": cpu, "kubernetes.io/batch-memory": memory}
    return pod("be", BE_UID, BE_CID, "BE", {"limits": batch, "requests": batch}, "BestEffort")


def cluster(pods: list[dict[str, Any]], threshold: dict[str, Any] | None = None, cpu: str = "2",
            memory: int = 64 * 2**30) -> ClusterState:
    state = ClusterState(AGENT_KINDS)
    objs: dict[str, list[dict[str, Any]]] = {
        "Node": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                  "status": {"capacity": {"cpu": cpu, "memory": str(memory)},
                             "allocatable": {"cpu": cpu, "memory": str(memory)}}}],
        "Pod": pods, "ConfigMap": []}
    if threshold is not None:
        objs["ConfigMap"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                              "data": {"resource-threshold-config": json.dumps({"clusterStrategy": threshold})}}]
    state.replace_all(objs)
    return state


def parse_samples(text: str) -> list[tuple[float, int]]:
    return [(float(t), int(u)) for t, u in (line.split() for line in text.splitlines() if line.strip() != "end")
            if t]


def enforcing(cg: RealCgroupRoot, state: ClusterState, metrics: AgentMetrics | None = None) -> Agent:
    return Agent(AgentOptions(NODE, enforce=True), Collector(Path("/proc"), cg.root), state, metrics=metrics)


def test_memory_limit_is_written_and_the_kernel_enforces_it(cg: RealCgroupRoot) -> None:
    cg.mkdir(BE_CTR)
    agent = enforcing(cg, cluster([be_pod(memory="64Mi")]))
    writes = agent.cycle(now=0.0).as_dict()["cgroupWrites"]
    assert {"path": f"memory/{BE_CTR}", "file": "memory.limit_in_bytes", "value": str(64 * MI)} in writes
    assert cg.read("memory", BE_CTR, "memory.limit_in_bytes") == str(64 * MI)
    assert cg.read("memory", BE_POD, "memory.limit_in_bytes") == str(64 * MI)
    child = cg.spawn(BE_CTR, allocator_code(512 * MI, hold_seconds=0), controllers=("memory",))
    rc = child.wait(timeout=60)
    child.communicate()
    oom = dict(line.split() for line in cg.read("memory", BE_CTR, "memory.oom_control").splitlines())
    failcnt = int(cg.read("memory", BE_CTR, "memory.failcnt"))
    print(f"\nchild exit {rc}, memory.failcnt {failcnt}, oom_kill {oom.get('oom_kill')}")
    assert failcnt > 0                                        # the limit was hit...
    assert rc == -9 or int(cg.read("memory", BE_CTR, "memory.max_usage_in_bytes")) <= 64 * MI
    if rc == -9:                                              # ...and the kernel killed it (no swap here)
        assert int(oom["oom_kill"]) >= 1
    assert int(cg.read("memory", BE_CTR, "memory.max_usage_in_bytes")) <= 64 * MI


def test_cpu_quota_is_written_and_a_busy_loop_is_throttled(cg: RealCgroupRoot) -> None:
    cg.mkdir(BE_CTR)
    agent = enforcing(cg, cluster([be_pod(cpu="200")]))
    agent.cycle(now=0.0)
    assert cg.read("cpu", BE_CTR, "cpu.cfs_quota_us") == "20000"
    assert cg.read("cpu", BE_POD, "cpu.cfs_quota_us") == "20000"
    assert cg.read("cpu", BE_CTR, "cpu.shares") == "204"

    def throttled_periods() -> int:
        # The pod and its container hold the same quota: the kernel throttles the loop at whichever of the two
        # runs out first in a period (it varies from run to run), and counts it there.
        return sum(int(line.split()[1]) for folder in (BE_POD, BE_CTR)
                   for line in cg.read("cpu", folder, "cpu.stat").splitlines() if line.startswith("nr_throttled "))

    throttled = throttled_periods()
    usage = int(cg.read("cpuacct", BE_CTR, "cpuacct.usage"))
    started = time.monotonic()
    child = cg.spawn(BE_CTR, "import time\nt = time.monotonic() + 1.0\nwhile time.monotonic() < t: pass\n")
    child.communicate(timeout=30)
    wall = time.monotonic() - started
    used = (int(cg.read("cpuacct", BE_CTR, "cpuacct.usage")) - usage) / 1e9
    print(f"\nbusy loop under a 200m quota: {used:.3f} s CPU in {wall:.3f} s, "
          f"nr_throttled +{throttled_periods() - throttled}")
    assert throttled_periods() > throttled
    assert used <= 0.2 * wall * 1.1


def _metric(metrics: AgentMetrics, name: str) -> float:
    total = 0.0
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


def test_suppression_tightens_children_first_on_cgroup_v1_and_restores_them(cg: RealCgroupRoot) -> None:
    cg.mkdir(BE_CTR)
    metrics = AgentMetrics()
    suppress = {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 1}
    state = cluster([be_pod(cpu="1k")], suppress)
    agent = enforcing(cg, state, metrics)
    agent.cycle(now=0.0)                                    # no CPU rate yet: the pod's own limits only
    assert cg.read("cpu", BE_CTR, "cpu.cfs_quota_us") == "100000"
    time.sleep(0.2)
    writes = agent.cycle(now=1.0).as_dict()["cgroupWrites"]           # 1 % of 2 cores, minus usage: the 2000 µs floor
    assert [w["path"] for w in writes] == [f"cpu/{BE_CTR}", f"cpu/{BE_POD}", "cpu/kubepods/besteffort"]
    assert [cg.read("cpu", p, "cpu.cfs_quota_us") for p in ("kubepods/besteffort", BE_POD, BE_CTR)] == ["2000"] * 3
    assert _metric(metrics, "colocation_agent_cgroup_write_refusals_total") == 0
    assert _metric(metrics, "koordlet_be_suppress_cpu_cores") == 0.02
    state.replace("ConfigMap", [])                           # suppression off: the quota is recovered
    writes = agent.cycle(now=2.0).as_dict()["cgroupWrites"]
    assert [w["path"] for w in writes] == ["cpu/kubepods/besteffort", f"cpu/{BE_POD}", f"cpu/{BE_CTR}"]
    assert [cg.read("cpu", p, "cpu.cfs_quota_us") for p in ("kubepods/besteffort", BE_POD, BE_CTR)] == [
        "-1", "100000", "100000"]
    assert _metric(metrics, "colocation_agent_cgroup_write_refusals_total") == 0


def test_nothing_is_written_to_non_be_pods(cg: RealCgroupRoot) -> None:
    cg.mkdir(BE_CTR)
    cg.mkdir(LS_CTR)
    cg.mkdir(KBE_CTR)
    sentinels = {("cpu", "cpu.cfs_quota_us"): "70000", ("cpu", "cpu.shares"): "717",
                 ("memory", "memory.limit_in_bytes"): str(123 * MI)}
    for folder in (LS_CTR, LS_CTR.rsplit("/", 1)[0]):
        for (ctl, name), value in sentinels.items():
            cg.write(ctl, folder, name, value)
    for folder in (KBE_CTR, KBE_CTR.rsplit("/", 1)[0]):      # kubelet BestEffort, not Koordinator BE
        cg.write("cpu", folder, "cpu.shares", "3")
        cg.write("memory", folder, "memory.limit_in_bytes", str(99 * MI))
    batch = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}
    ls = pod("ls", LS_UID, LS_CID, "LS", {"limits": {"cpu": "1", "memory": "1Gi", **batch}}, "Burstable")
    kbe = pod("kbe", KBE_UID, KBE_CID, None, {"limits": batch, "requests": batch}, "BestEffort")
    suppress = {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 1}
    agent = enforcing(cg, cluster([be_pod(), ls, kbe], suppress))
    paths = []
    for i in range(3):
        paths += [w["path"] for w in agent.cycle(now=float(i)).as_dict()["cgroupWrites"]]
        time.sleep(0.1)
    assert any(BE_UID in p for p in paths)
    assert not [p for p in paths if LS_UID in p or KBE_UID in p]
    for folder in (LS_CTR, LS_CTR.rsplit("/", 1)[0]):
        for (ctl, name), value in sentinels.items():
            assert cg.read(ctl, folder, name) == value, (folder, name)
    for folder in (KBE_CTR, KBE_CTR.rsplit("/", 1)[0]):
        assert cg.read("cpu", folder, "cpu.shares") == "3"
        assert cg.read("memory", folder, "memory.limit_in_bytes") == str(99 * MI)


def test_memcg_threshold_fires_on_the_way_up_only(cg: RealCgroupRoot) -> None:
    cg.mkdir("x")
    watch = MemoryWatch(cg.root, Path("/proc"), "auto")
    try:
        assert watch.sources == ["memcg-threshold"]
        used = meminfo_used()
        watch.arm(used + 96 * MI, 64 * 2**30)
        # Well past the level: right after a large free (an earlier test's), MemAvailable can lag the cgroup's
        # count by more than 100 MB, and the watermark is on MemAvailable.
        child = cg.spawn("x", allocator_code(640 * MI, hold_seconds=4.0), controllers=("memory",))
        fired = watch.wait(10.0)
        seen = time.monotonic()
        assert fired == "memcg-threshold"
        # On the way up the watch may report again a little higher, while meminfo lags the cgroup (notify.py):
        # let those come while the child still holds its memory, until a quiet 0.5 s (the hold is 4 s).
        while watch.wait(0.5) is not None:
            assert time.monotonic() - seen < 3.5, "still reporting while the child held its memory"
        out, _ = child.communicate(timeout=30)         # the child lets go: usage falls back
        samples = parse_samples(out)
        assert watch.wait(0.5) is None                 # the fall is a crossing too: not reported
        print(f"\nmemcg threshold fired {(seen - samples[0][0]) * 1000:.1f} ms after the allocation started")
    finally:
        watch.close()


def test_the_threshold_notifies_again_after_firing(cg: RealCgroupRoot) -> None:
    """Once fired, a threshold sits below usage and can never fire upward again: it must be set anew, however
    close the new one is to it (a re-arm tolerance bigger than the moves here). The kernel's eventfd is watched
    directly: the watch's own meminfo checks, which can see a crossing first, are not what is tested here."""
    cg.mkdir("x")
    cg.mkdir("y")
    watch = MemoryWatch(cg.root, Path("/proc"), "memcg-threshold")
    memcg = watch._memcg
    assert memcg is not None

    def fires(timeout: float) -> bool:
        assert memcg.eventfd is not None
        poller = select.poll()  # not select(): the fd can be past 1023 after the suite opened many files
        poller.register(memcg.eventfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000)) and memcg.crossed_up()

    try:
        capacity = 2048 * 2**30                        # re-arm tolerance 2 GiB: bigger than the moves below
        watch.arm(meminfo_used() + 24 * MI, capacity)
        # Far past the level, whatever the rest of the machine frees meanwhile.
        first = cg.spawn("x", allocator_code(768 * MI, hold_seconds=30.0), controllers=("memory",))
        assert fires(10.0)
        assert first.stdout is not None
        while first.stdout.readline().strip() != "end":
            pass
        watch.arm(meminfo_used() + 8 * MI, capacity)  # the level is still ahead: armed anew, just above usage
        second = cg.spawn("y", allocator_code(512 * MI, hold_seconds=1.0), controllers=("memory",))
        assert fires(10.0)
        second.communicate(timeout=30)
        first.kill()
        first.communicate()
    finally:
        watch.close()


def test_real_allocation_over_the_watermark_is_evicted_through_the_notification(cg: RealCgroupRoot) -> None:
    cg.mkdir(BE_CTR)
    margin = 512 * MI          # room for the rest of the machine (other processes) to move meanwhile
    used0 = meminfo_used()
    capacity = 2 * (used0 + margin)                  # watermark 50 %: just above this machine's usage now
    watermark = capacity // 2
    state = cluster([be_pod(memory="4Gi")], {"enable": True, "memoryEvictThresholdPercent": 50}, memory=capacity)
    with ReplayAPIServer() as srv:
        srv.add_json("POST", f"/api/v1/namespaces/{NS}/pods/be/eviction",
                     {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, status=201)
        srv.add_json("POST", f"/api/v1/namespaces/{NS}/events", {"kind": "Event"}, status=201)
        srv.add_json("PATCH", f"/api/v1/nodes/{NODE}/status", {"kind": "Node"})
        from kubernetes import client

        metrics = AgentMetrics()
        actions = KubeActions(client.ApiClient(client.Configuration(host=srv.url)), NODE)
        agent = Agent(AgentOptions(NODE, enforce=True), Collector(Path("/proc"), cg.root), state, actions, metrics)
        watch = MemoryWatch(cg.root, Path("/proc"), "auto", metrics)
        stop = threading.Event()
        loop = threading.Thread(target=run_loop, args=(agent, 30.0, stop, watch), daemon=True)
        loop.start()
        child = None
        try:
            time.sleep(0.3)                           # the first cycle has run and armed the threshold
            assert meminfo_used() < watermark, "the machine's usage moved past the test's watermark"
            child = cg.spawn(BE_CTR, allocator_code(margin + 1024 * MI, hold_seconds=5.0), controllers=("memory",))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not srv.requests_to("POST", f"/api/v1/namespaces/{NS}/pods/be/eviction"):
                time.sleep(0.001)
            (request,) = srv.requests_to("POST", f"/api/v1/namespaces/{NS}/pods/be/eviction")
            assert child.stdout is not None
            lines = []
            for line in iter(child.stdout.readline, ""):
                if line.strip() == "end":
                    break
                lines.append(line)
            samples = parse_samples("".join(lines))
        finally:
            stop.set()
            watch.wake()
            loop.join(timeout=10)
            watch.close()
            if child is not None:
                child.kill()
                child.communicate()
    assert _metric(metrics, "colocation_agent_memory_notifications_total") >= 1
    span = crossing(samples, watermark)
    assert span is not None, "the allocation did not cross the watermark"
    before, after = span
    latency, upper = (request.at - after) * 1000, (request.at - before) * 1000
    print(f"\nwatermark crossing -> eviction request (memcg threshold): {latency:.1f} ms "
          f"(at most {upper:.1f} ms counting from the last sample below the watermark)")
    assert upper < 5000                                # the backstop interval is 30 s: this came from the kernel
    assert request.body["deleteOptions"]["preconditions"]["uid"] == BE_UID


@pytest.mark.skipif(unified_unavailable_reason() is not None or not os.path.exists("/proc/pressure/memory"),
                    reason=unified_unavailable_reason() or "no PSI on this kernel")
def test_psi_trigger_is_registered_where_the_kernel_takes_one() -> None:
    folder = unified_mount() / f"colocation-test-{os.getpid()}-psi"
    kubepods = folder / "kubepods"
    kubepods.mkdir(parents=True)
    try:
        watch = MemoryWatch(folder, Path("/proc"), "auto")
        try:
            print(f"\nsources: {watch.describe()}; refused: {watch.problems}")
            assert "psi" in watch.sources and "sampler" in watch.sources
            assert watch.psi_trigger is not None and watch.psi_trigger.startswith(str(kubepods / "memory.pressure"))
        finally:
            watch.close()
    finally:
        kubepods.rmdir()
        folder.rmdir()


CPUSET_REASON = cpuset_unavailable_reason()


def _cpus_allowed(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


@pytest.mark.skipif(CPUSET_REASON is not None, reason=CPUSET_REASON or "")
def test_cpuset_suppression_confines_a_real_be_process_and_lets_it_go() -> None:
    """The whole agent, cpuset policy, on real cgroup v1 cpuset folders (tier, pod, container) and this machine's
    real topology. Its budget always asks for every CPU of a machine with 2 (BE never gets fewer than 2), so the
    narrowing comes from the node: a reserved CPU (``node.koordinator.sh/reservation``) leaves BE the others;
    lifting the reservation widens BE to every CPU again, tier first."""
    online = sorted(parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text()))
    if len(online) < 2:
        pytest.skip("needs 2 CPUs or more to narrow a set")
    reserved, every = online[-1], format_cpu_list(online)
    rest = format_cpu_list(online[:-1])
    with real_cgroup_root(cpuset=True) as cg:
        cg.mkdir(BE_CTR)
        metrics = AgentMetrics()
        state = cluster([be_pod(cpu="1k")], {"enable": True, "cpuSuppressPolicy": "cpuset"}, cpu=str(len(online)))
        node = state.node(NODE)
        assert node is not None
        node["metadata"]["annotations"] = {"node.koordinator.sh/reservation": json.dumps(
            {"reservedCPUs": str(reserved)})}
        in_pod, in_ctr = cg.spawn(BE_POD, "import time\ntime.sleep(60)\n"), cg.spawn(BE_CTR, "import time\n"
                                                                                     "time.sleep(60)\n")
        try:
            for child, rel in ((in_pod, BE_POD), (in_ctr, BE_CTR)):
                deadline = time.monotonic() + 10
                while str(child.pid) not in cg.read("cpuset", rel, "cgroup.procs").split():
                    assert child.poll() is None and time.monotonic() < deadline
                    time.sleep(0.01)
            agent = enforcing(cg, state, metrics)
            agent.cycle(now=0.0)                              # no CPU rate yet
            time.sleep(0.2)
            out = agent.cycle(now=1.0).as_dict()
            narrowed = [(w["path"], w["value"]) for w in out["cgroupWrites"] if w["file"] == "cpuset.cpus"]
            assert narrowed == [(f"cpuset/{BE_CTR}", rest), (f"cpuset/{BE_POD}", rest),
                                ("cpuset/kubepods/besteffort", rest)]
            assert [cg.read("cpuset", p, "cpuset.cpus") for p in ("kubepods/besteffort", BE_POD, BE_CTR)] == [rest] * 3
            assert (_cpus_allowed(in_pod.pid), _cpus_allowed(in_ctr.pid)) == (rest, rest)
            assert out["cpuSuppress"] == {"policy": "cpuset", "beCPUs": rest, "cores": float(len(online) - 1),
                                          "fallback": None, "reason": None}
            assert _metric(metrics, "colocation_agent_cgroup_write_refusals_total") == 0
            node["metadata"]["annotations"] = {}              # the reservation lifted: every CPU again
            time.sleep(0.2)
            out = agent.cycle(now=2.0).as_dict()
            widened = [(w["path"], w["value"]) for w in out["cgroupWrites"] if w["file"] == "cpuset.cpus"]
            assert widened == [("cpuset/kubepods/besteffort", every), (f"cpuset/{BE_POD}", every),
                               (f"cpuset/{BE_CTR}", every)]
            assert (_cpus_allowed(in_pod.pid), _cpus_allowed(in_ctr.pid)) == (every, every)
            assert _metric(metrics, "colocation_agent_cgroup_write_refusals_total") == 0
            assert _metric(metrics, "koordlet_be_suppress_cpu_cores") == len(online)
        finally:
            for child in (in_pod, in_ctr):
                child.kill()
                child.wait()
