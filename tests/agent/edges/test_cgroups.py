"""BE limits and BE suppression over fake cgroup trees: what ``once`` lists, what ``run`` writes, refusals,
metrics, /healthz, and an unreachable API server."""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.agent_trees import FakePod, write_cgroup_v1, write_cgroup_v2, write_proc
from harness.apiserver import Blackhole
from tests.agent.test_cycle import GI, NODE, USAGE, pods_by_name, recorded, run_once, write_state
from webhook.agent.cycle import Agent
from webhook.agent.domain.cgroup_limits import CgroupWrite
from webhook.agent.domain.sample import Layout
from webhook.agent.edges.actions import KubeActions
from webhook.agent.edges.cgroups import CgroupFiles, WriteResult
from webhook.agent.edges.collectors import Collector
from webhook.agent.edges.metrics_server import Health, serve
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cluster.files import FilesSource
from webhook.cluster.state import AGENT_KINDS, ClusterState

pytestmark = pytest.mark.usefixtures("restore_logging")

BE_BATCH_0 = "59e8921c-cd38-4920-954e-8d2e83d2374c"
CID_0 = "59e8921ccd384920954e8d2e83d2374c59e8921ccd384920954e8d2e83d2374c"
LS_UID = "7689fea4-a4f5-428a-b56b-bbfba219d730"


def fakes(usage: dict[str, int] = USAGE) -> list[FakePod]:
    pods = pods_by_name()
    qos = {"ls-web-0": "guaranteed"}
    return [FakePod(pods[n]["metadata"]["uid"], qos.get(n, "besteffort"), u, 0, 0,
                    tuple(s["containerID"] for s in pods[n]["status"]["containerStatuses"])) for n, u in usage.items()]


def tree(tmp: Path, version: int, driver: str, separate: bool = False) -> Path:
    if version == 2:
        return write_cgroup_v2(tmp / "cgroup", fakes(), driver)
    return write_cgroup_v1(tmp / "cgroup", fakes(), driver, separate_cpu=separate)


def folders(version: int, driver: str, separate: bool) -> tuple[str, str, str]:
    """(cpu folder, memory folder, container leaf) of be-batch-0 relative to the cgroup root."""
    if driver == "systemd":
        pod = f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{BE_BATCH_0.replace('-', '_')}.slice"
        leaf = f"cri-containerd-{CID_0}.scope"
    else:
        pod, leaf = f"kubepods/besteffort/pod{BE_BATCH_0}", CID_0
    if version == 2:
        return pod, pod, leaf
    return f"cpu/{pod}", f"memory/{pod}", leaf      # combined mounts: ``cpu`` is the link to ``cpu,cpuacct``


LAYOUTS = [(2, "systemd", False), (2, "cgroupfs", False), (1, "systemd", False), (1, "cgroupfs", False),
           (1, "cgroupfs", True), (1, "systemd", True)]


@pytest.mark.parametrize("version,driver,separate", LAYOUTS)
def test_once_lists_the_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int, driver: str,
                               separate: bool) -> None:
    state = write_state(tmp_path / "state")
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, version, driver, separate)
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg))
    assert rc == 0, err
    writes = out["cgroupWrites"]
    cpu, mem, leaf = folders(version, driver, separate)
    if version == 2:
        expected = [{"path": f"{cpu}/{leaf}", "file": "cpu.max", "value": "200000 100000"},
                    {"path": f"{mem}/{leaf}", "file": "memory.max", "value": str(4 * GI)},
                    {"path": cpu, "file": "cpu.weight", "value": "79"}]
    else:
        expected = [{"path": f"{cpu}/{leaf}", "file": "cpu.cfs_quota_us", "value": "200000"},
                    {"path": f"{mem}/{leaf}", "file": "memory.limit_in_bytes", "value": str(4 * GI)},
                    {"path": cpu, "file": "cpu.shares", "value": "2048"}]
    for w in expected:
        assert w in writes
    # Tightened limits go container first: be-batch-0's container quota comes before its pod's.
    quota_file = "cpu.max" if version == 2 else "cpu.cfs_quota_us"
    order = [w["path"] for w in writes if w["file"] == quota_file]
    assert order.index(f"{cpu}/{leaf}") < order.index(cpu)
    assert all(LS_UID not in w["path"] and LS_UID.replace("-", "_") not in w["path"] for w in writes)
    assert all(list(w) == ["path", "file", "value"] for w in writes)
    assert len(writes) == 4 * 6            # 4 BE pods × (pod, container) × (quota, weight, memory)
    assert all((cg / w["path"] / w["file"]).exists() for w in writes)


def test_once_text_lists_the_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write_state(tmp_path / "state")
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 2, "cgroupfs")
    rc, out, _ = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                          "--cgroup-root", str(cg), "--output", "text")
    assert rc == 0
    assert f"cgroup write kubepods/besteffort/pod{BE_BATCH_0}/cpu.max = 200000 100000\n" in out


def _state(folder: Path) -> ClusterState:
    state = ClusterState(AGENT_KINDS)
    FilesSource(folder, state).load()
    return state


@pytest.mark.parametrize("version,driver,separate", LAYOUTS)
def test_run_makes_exactly_the_listed_writes(tmp_path: Path, version: int, driver: str, separate: bool) -> None:
    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, version, driver, separate)
    ls_files = {p: p.read_text() for p in cg.rglob("*")
                if p.is_file() and (LS_UID in str(p) or LS_UID.replace("-", "_") in str(p))}
    assert ls_files                                          # the LS pod has folders and limit files too
    planned = Agent(AgentOptions(NODE), Collector(proc, cg), state).cycle(now=0.0).as_dict()["cgroupWrites"]
    metrics = AgentMetrics()
    agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state, metrics=metrics)
    made = agent.cycle(now=0.0).as_dict()["cgroupWrites"]
    assert made == planned and made
    for w in made:
        assert (cg / w["path"] / w["file"]).read_text() == w["value"]
    assert agent.cycle(now=1.0).as_dict()["cgroupWrites"] == []          # in place: nothing more to write
    assert {p: p.read_text() for p in ls_files} == ls_files      # the LS pod's files untouched
    file = "cpu.max" if version == 2 else "cpu.cfs_quota_us"
    assert metrics.cgroup_writes.labels(file)._value.get() == 8
    assert metrics.cgroup_last_write.labels(file)._value.get() > 0


def test_dry_run_writes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 2, "systemd")
    before = {p: p.read_text() for p in cg.rglob("*") if p.is_file()}
    with caplog.at_level(logging.INFO, "colocation-agent"):
        out = Agent(AgentOptions(NODE, dry_run=True, enforce=True), Collector(proc, cg), state).cycle(now=0.0).as_dict()
    assert out["cgroupWrites"] and {p: p.read_text() for p in before} == before
    assert sum("dry-run: would write" in r.getMessage() for r in caplog.records) == len(out["cgroupWrites"])


def test_a_refused_write_is_counted_logged_and_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 2, "cgroupfs")
    target = cg / f"kubepods/besteffort/pod{BE_BATCH_0}/{CID_0}/memory.max"
    metrics = AgentMetrics()
    agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state, metrics=metrics)
    original = agent._files

    wrapped: set[int] = set()

    def vanish_then_apply(layout: Layout) -> CgroupFiles:
        files = original(layout)
        if id(files) in wrapped:    # the cycle reads and writes through the same files: wrapped once
            return files
        wrapped.add(id(files))
        real_apply = files.apply

        def apply(writes: Sequence[CgroupWrite]) -> list[WriteResult]:
            target.unlink()
            target.mkdir()          # the kernel says EISDIR here; a vanished cgroup says ENOENT
            return real_apply(writes)

        files.apply = apply  # type: ignore[method-assign]  # the kernel's refusal, made to happen mid-plan
        return files

    agent._files = vanish_then_apply  # type: ignore[method-assign]  # the same files, wrapped once
    with caplog.at_level(logging.WARNING, "colocation-agent"):
        first = agent.cycle(now=0.0).as_dict()["cgroupWrites"]
    assert metrics.cgroup_refusals.labels("memory.max", "EISDIR")._value.get() == 1
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused == [(f"cgroup write refused, retrying next cycle: kubepods/besteffort/pod{BE_BATCH_0}/{CID_0}/"
                        f"memory.max = {4 * GI}: EISDIR (Is a directory)")]
    # Everything else was applied; the refused write is not reported as done: the next cycle plans it again.
    agent._files = original  # type: ignore[method-assign]
    target.rmdir()
    target.write_text("max\n")
    again = agent.cycle(now=1.0).as_dict()["cgroupWrites"]
    assert again == [{"path": f"kubepods/besteffort/pod{BE_BATCH_0}/{CID_0}", "file": "memory.max",
                      "value": str(4 * GI)}]
    assert len(first) == 24


# -- BE suppression ---------------------------------------------------------------------------------------
def _suppress_state(tmp: Path, policy: str, percent: int = 65) -> ClusterState:
    cm = {"resource-threshold-config": json.dumps({"clusterStrategy": {
        "enable": True, "cpuSuppressPolicy": policy, "cpuSuppressThresholdPercent": percent}})}
    return _state(write_state(tmp / "state", cm_data=cm))


def _two_cpu_samples(agent: Agent, proc: Path, cg: Path) -> dict[str, Any]:
    """Cycle, then 1 s later with the node 600 m busier over 2 CPUs... and ls-web-0 at 500 m."""
    write_proc(proc, 32 * GI, 24 * GI, busy=1000, idle=9000, cpus=2)
    agent.cycle(now=10.0)
    write_proc(proc, 32 * GI, 24 * GI, busy=1600, idle=9400, cpus=2)     # 60 % of 2 CPUs: 1200 m
    ls = cg / f"kubepods.slice/kubepods-pod{LS_UID.replace('-', '_')}.slice/cpu.stat"
    ls.write_text("usage_usec 500000\n")
    return agent.cycle(now=11.0).as_dict()


def test_cfs_quota_suppression_writes_the_besteffort_quota(tmp_path: Path) -> None:
    state = _suppress_state(tmp_path, "cfsQuota")
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 2, "systemd")
    metrics = AgentMetrics()
    agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state, metrics=metrics)
    out = _two_cpu_samples(agent, proc, cg)
    # 8 cores × 65 % = 5200 − ls-web-0 500 − system (1200 − 500) = 4000 m -> 400000 µs per 100000.
    be = {"path": "kubepods.slice/kubepods-besteffort.slice", "file": "cpu.max", "value": "400000 100000"}
    assert out["cgroupWrites"] == [be]
    assert (cg / be["path"] / "cpu.max").read_text() == "400000 100000"
    assert metrics.suppress_cores.labels(NODE, "cfsQuota")._value.get() == 4.0
    assert metrics.suppress_ls_used.labels(NODE)._value.get() == 0.5


# The cpuset policy (and its fallback to cfsQuota): tests/agent/capabilities/test_cpu_suppress.py.


# -- metrics and /healthz --------------------------------------------------------------------------------------
def test_allocatable_metric_has_koordlet_labels(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    metrics = AgentMetrics()
    agent = Agent(AgentOptions(NODE), Collector(proc, tree(tmp_path, 2, "systemd")), state, metrics=metrics)
    agent.cycle(now=0.0)
    write_proc(tmp_path / "proc", 32 * GI, 24 * GI, busy=1000, idle=10000)   # a second sample: an idle node's rate
    agent.cycle(now=1.0)
    text = generate_latest(metrics.registry).decode()
    # 8 × 60 %: the second sample measured every pod idle (the first had no rate: nothing computed)
    assert ('koordlet_node_resource_allocatable{node="colo-node-1",resource="kubernetes.io/batch-cpu",'
            'unit="integer"} 4800.0') in text
    assert 'resource="kubernetes.io/batch-memory",unit="byte"' in text


def test_healthz_reports_the_age_of_the_last_cycle() -> None:
    now = [100.0]
    health = Health(1.0, clock=lambda: now[0])
    metrics = AgentMetrics()
    httpd = serve(0, metrics, health, host="127.0.0.1")
    port = httpd.server_address[1]

    def get(path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    try:
        assert get("/healthz")[0] == 200                       # starting, within 3 intervals
        now[0] = 104.0
        status, body = get("/healthz")
        assert status == 503 and json.loads(body)["status"] == "stuck"
        health.cycle_done()
        now[0] = 106.5
        status, body = get("/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok", "lastCycleAgeSeconds": 2.5, "limitSeconds": 3.0}
        now[0] = 107.5
        status, body = get("/healthz")
        assert status == 503 and json.loads(body)["lastCycleAgeSeconds"] == 3.5
        status, body = get("/metrics")
        assert status == 200 and b"colocation_agent_cycle_duration_seconds" in body
        assert get("/nope")[0] == 404
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- API server unreachable ---------------------------------------------------------------------------------------


def test_unreachable_api_costs_one_timeout_per_cycle_and_cgroups_are_still_enforced(tmp_path: Path) -> None:
    import urllib3
    from kubernetes import client

    hole = Blackhole()
    try:
        cfg = client.Configuration(host=hole.url)
        cfg.retries = urllib3.Retry(total=3, connect=0)
        actions = KubeActions(client.ApiClient(cfg), NODE, timeout=0.5, connect_timeout=0.5)
        state = _state(write_state(tmp_path / "state"))
        proc = write_proc(tmp_path / "proc", 32 * GI, 8 * GI)      # 24Gi used: eviction candidates to try
        cg = tree(tmp_path, 2, "cgroupfs")
        agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state, actions)
        started = time.monotonic()
        out = agent.cycle(now=0.0).as_dict()
        elapsed = time.monotonic() - started
        assert out["evictions"] == []                      # none went through
        assert len(hole.accepted) == 1                     # one request, one timeout: not one per candidate
        assert elapsed < 2.0
        assert out["cgroupWrites"]
        assert all((cg / w["path"] / w["file"]).read_text() == w["value"] for w in out["cgroupWrites"])
        agent.cycle(now=10.0)                              # the next cycle tries again (once)
        assert len(hole.accepted) == 2
    finally:
        hole.close()


def test_recorded_node_has_the_capacity_the_tests_assume() -> None:
    assert recorded("nodes-get")["status"]["capacity"]["cpu"] == "8"


# -- what is read when ----------------------------------------------------------------------------------------
def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from webhook.agent.edges.cgroups import CgroupFiles

    reads: list[str] = []
    real = CgroupFiles._read

    def counted(self: CgroupFiles, path: str) -> str | None:
        reads.append(path)
        return real(self, path)

    monkeypatch.setattr(CgroupFiles, "_read", counted)
    return reads


def test_a_value_changed_behind_the_agents_back_is_noticed_within_the_verify_period_and_not_fought(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from webhook.agent.domain.coexistence import Capability
    from webhook.agent.edges.cgroups import VERIFY_SECONDS

    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 2, "cgroupfs")
    agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state)
    first = agent.cycle(now=0.0).as_dict()["cgroupWrites"]
    reads = _counting_reads(monkeypatch)
    assert agent.cycle(now=1.0).as_dict()["cgroupWrites"] == []      # the written folders read again, in place
    reads.clear()
    assert agent.cycle(now=2.0).as_dict()["cgroupWrites"] == []
    assert reads == []                                      # a steady node: nothing read again so soon
    # Over any period every BE folder (and the besteffort folder) is read, each file at most twice.
    for i in range(int(VERIFY_SECONDS)):
        assert agent.cycle(now=3.0 + i).as_dict()["cgroupWrites"] == []
    folders = {str(Path(r).parent.relative_to(cg)) for r in reads}
    assert folders == {w["path"] for w in first} | {"kubepods/besteffort"}
    assert len(folders) == 4 * 2 + 1
    assert max(reads.count(r) for r in reads) <= 2
    # Another writer (koordlet's executor, say) sets a BE file: read again within the verify period, the agent
    # notices the value it wrote is gone, says so once, and leaves BE cgroup limits to that writer.
    memory_max = cg / f"kubepods/besteffort/pod{BE_BATCH_0}/{CID_0}/memory.max"
    memory_max.write_text("max\n")
    now = 3.0 + VERIFY_SECONDS
    for i in range(int(3 * VERIFY_SECONDS)):
        assert agent.cycle(now=now + i).as_dict()["cgroupWrites"] == []
    assert memory_max.read_text() == "max\n"
    assert Capability.BE_CGROUP_LIMITS in agent.yielded
    assert agent.metrics.registry.get_sample_value("colocation_agent_other_writer",
                                                   {"capability": "be-cgroup-limits"}) == 1
    warnings = [r for r in caplog.records if "another writer" in r.getMessage()]
    assert len(warnings) == 1 and "memory.max" in warnings[0].getMessage()


def test_a_changed_pod_object_is_read_again_and_a_pod_that_left_is_forgotten(tmp_path: Path) -> None:
    import copy

    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 2, "cgroupfs")
    agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state)
    agent.cycle(now=0.0)
    agent.cycle(now=1.0)
    pods = state.objects("Pod")
    be0 = next(p for p in pods if p["metadata"]["uid"] == BE_BATCH_0)
    bigger = copy.deepcopy(be0)
    bigger["spec"]["containers"][0]["resources"]["limits"]["kubernetes.io/batch-memory"] = str(6 * GI)
    state.replace_all({"Pod": [bigger if p is be0 else p for p in pods], "Node": state.objects("Node"),
                       "ConfigMap": state.objects("ConfigMap")})
    writes = agent.cycle(now=2.0).as_dict()["cgroupWrites"]           # within the verify period: the new object is read
    assert {"path": f"kubepods/besteffort/pod{BE_BATCH_0}/{CID_0}", "file": "memory.max",
            "value": str(6 * GI)} in writes
    files = agent._cgroups
    assert files is not None and BE_BATCH_0 in files._seen
    state.replace_all({"Pod": [p for p in state.objects("Pod") if p["metadata"]["uid"] != BE_BATCH_0],
                       "Node": state.objects("Node"), "ConfigMap": state.objects("ConfigMap")})
    assert any(BE_BATCH_0 in path for path in files._fds)   # the files it read, kept open
    open_before = len(os.listdir("/proc/self/fd"))
    agent.cycle(now=3.0)
    assert BE_BATCH_0 not in files._seen
    assert not any(BE_BATCH_0 in path for path in files._fds)
    # Its six limit files closed (pod and container: quota, weight, memory); its folder is still there, so the
    # collector still reads its usage.
    assert len(os.listdir("/proc/self/fd")) == open_before - 6
    kept = len(files._fds)
    files.close()
    assert len(os.listdir("/proc/self/fd")) == open_before - 6 - kept


def test_a_dropped_agent_closes_the_files_it_kept_open(tmp_path: Path) -> None:
    import gc

    state = _state(write_state(tmp_path / "state"))
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = tree(tmp_path, 1, "cgroupfs")

    def open_here() -> list[str]:  # by path, not by count: other tests' garbage may close fds meanwhile
        out = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
                    out.append(fd)
        return out

    agent = Agent(AgentOptions(NODE, enforce=True), Collector(proc, cg), state)
    agent.cycle(now=0.0)
    agent.cycle(now=1.0)
    files = agent._cgroups
    assert files is not None and len(files._fds) == 4 * 2 * 4 + 2   # BE pods' folders: 4 files each; besteffort
    assert len(open_here()) >= len(files._fds)                        # the cgroup files, and /proc's and pods'
    del agent, files
    gc.collect()
    assert open_here() == []
