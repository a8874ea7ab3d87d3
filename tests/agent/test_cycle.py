"""The agent end to end: files cluster state + temporary /proc and cgroup trees, ``once`` output,
and the API calls against the replay server serving recorded kube-apiserver responses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.agent_trees import FakePod, tick_cpu, write_cgroup_v2, write_proc
from harness.apiserver import ReplayAPIServer, load_exchange
from tests.events_api import EventsAPI
from webhook.agent.cycle import Agent
from webhook.agent.domain.eviction import EvictOutcome
from webhook.agent.domain.thresholds import parse_thresholds
from webhook.agent.edges.actions import API_CALLS, KubeActions
from webhook.agent.edges.collectors import Collector
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cli import agent as cli
from webhook.cluster.files import FilesSource
from webhook.cluster.state import AGENT_KINDS, ClusterState

GI = 2**30
NODE = "colo-node-1"
NS = "colo-demo"


pytestmark = pytest.mark.usefixtures("restore_logging")


def recorded(name: str) -> Any:
    return load_exchange(name)["response"]["body"]


def pods_by_name() -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in recorded("pods-list-field-selector-node")["items"]}


def write_state(folder: Path, configmap: bool = True, cm_data: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "node.json").write_text(json.dumps(recorded("nodes-get")))
    pods = recorded("pods-list-field-selector-node")
    items = [{"apiVersion": "v1", "kind": "Pod", **p} for p in pods["items"]]   # list items carry no kind
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": items}))
    if configmap:
        cm = recorded("configmaps-get-slo-controller-config")
        if cm_data is not None:
            cm["data"] = cm_data
        (folder / "configmap.json").write_text(json.dumps(cm))
    return folder


def write_node(tmp: Path, used: int, usage: dict[str, int]) -> tuple[Path, Path]:
    """A 32Gi machine using ``used`` bytes, with a cgroup v2 (systemd) tree for the recorded pods."""
    proc = write_proc(tmp / "proc", 32 * GI, 32 * GI - used)
    pods = pods_by_name()
    qos = {"ls-web-0": "guaranteed"}
    fakes = [FakePod(pods[n]["metadata"]["uid"], qos.get(n, "besteffort"), u, 0, 0,
                     tuple(s["containerID"] for s in pods[n]["status"]["containerStatuses"])) for n, u in usage.items()]
    return proc, write_cgroup_v2(tmp / "cgroup", fakes)


USAGE = {"be-batch-0": 2 * GI, "be-batch-1": 1 * GI, "be-evict-ok": 3 * GI // 2, "be-protected": GI // 2,
         "ls-web-0": 4 * GI}


def run_cli(*argv: str) -> int:
    try:
        return cli.main(list(argv))
    except SystemExit as exc:  # argparse's own errors exit from the parser
        return int(exc.code or 0)


def run_once(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    rc = run_cli("once", "--cpu-sample-seconds", "0", *argv)
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("{") else out), err


def test_once_over_files_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write_state(tmp_path / "state")
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)   # 75% of 32Gi
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg))
    assert rc == 0, err
    assert list(out) == ["node", "memory", "releaseTargetBytes", "evictions", "batch", "batchReason", "mid",
                         "midReason", "conditions", "cgroupWrites", "cpuSuppress", "cpuEviction", "memoryEviction",
                         "capabilitiesOff", "configError", "configWarnings", "configNotices"]
    assert out["capabilitiesOff"] == {}
    assert (out["configError"], out["configWarnings"], out["configNotices"]) == (None, [], [])
    # One sample is no CPU rate: nothing is computed, and the node's values (none here) are left as they are.
    assert out["batchReason"] == ("no CPU usage rate measured yet (a rate needs two samples): the node's values "
                                  "are left as they are")
    assert out["memory"] == {"capacityBytes": 32 * GI, "usedBytes": 24 * GI, "usagePercent": 75.0}
    assert out["releaseTargetBytes"] == 2405181686            # ceil(24Gi - 32Gi × 68%)
    assert [(e["name"], e["priority"], e["usageBytes"], e["reason"]) for e in out["evictions"]] == [
        ("be-batch-1", 3000, GI, "EvictPodByNodeMemoryUsage"),      # koord-free first
        ("be-batch-0", 5000, 2 * GI, "EvictPodByNodeMemoryUsage")]  # then the biggest; 3Gi covers 2.24Gi
    assert list(out["evictions"][0]) == ["namespace", "name", "uid", "priority", "usageBytes", "reason"]
    assert out["evictions"][0]["uid"] == "8cafaeb2-c37d-453e-99a7-080f42a11635"
    assert out["batch"] == {"kubernetes.io/batch-cpu": 0, "kubernetes.io/batch-memory": 0}
    assert out["conditions"][0]["type"] == "BEMemoryPressure" and out["conditions"][0]["status"] == "True"
    assert list(out["conditions"][0]) == ["type", "status", "reason", "message"]


def test_once_without_configmap_is_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write_state(tmp_path / "state", configmap=False)
    proc, cg = write_node(tmp_path, 30 * GI, USAGE)
    rc, out, _ = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                          "--cgroup-root", str(cg))
    assert rc == 0
    assert out["evictions"] == [] and out["releaseTargetBytes"] == 0
    # Off, but for what the node's BE pods request (4000, 8Gi): a kubelet restart keeps them admitted.
    assert out["batch"] == {"kubernetes.io/batch-cpu": 4000, "kubernetes.io/batch-memory": 8 * GI}
    assert out["batchReason"].startswith("colocation is off: no slo-controller-config ConfigMap (off by default); "
                                         "kubernetes.io/batch-cpu held at 4000 ")
    assert out["conditions"][0]["status"] == "False"


def test_once_on_this_machine_says_why_batch_is_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc, cg = write_node(tmp_path, 24 * GI, {})
    rc, out, err = run_once(capsys, "--node-name", "here", "--proc-root", str(proc), "--cgroup-root", str(cg),
                            "--output", "text")
    assert rc == 0, err
    assert "batch: kubernetes.io/batch-cpu=0, kubernetes.io/batch-memory=0\n" in out
    assert ("batch why: colocation is off: no slo-controller-config ConfigMap (off by default); no Node object here "
            "found (this machine's capacity stands in; nothing is published)\n") in out


def test_once_with_colocation_disabled_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cm = recorded("configmaps-get-slo-controller-config")
    colo = json.loads(cm["data"]["colocation-config"])
    state = write_state(tmp_path / "state", cm_data={**cm["data"],
                                                     "colocation-config": json.dumps({**colo, "enable": False})})
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg))
    assert rc == 0, err
    assert out["batch"] == {"kubernetes.io/batch-cpu": 4000, "kubernetes.io/batch-memory": 8 * GI}
    assert out["batchReason"].startswith("colocation is disabled in slo-controller-config ")


TYPO_WARNING = ('slo-controller-config: resource-threshold-config: clusterStrategy: unknown key '
                '"memoryEvictThresholdPrecent" is ignored, did you mean "memoryEvictThresholdPercent"?')


def _typo_data() -> dict[str, str]:
    data = recorded("configmaps-get-slo-controller-config")["data"]
    thr = json.loads(data["resource-threshold-config"])
    thr["clusterStrategy"] = {**thr["clusterStrategy"], "memoryEvictThresholdPrecent": 40}
    colo = json.loads(data["colocation-config"])
    return {**data, "resource-threshold-config": json.dumps(thr),
            "colocation-config": json.dumps({**colo, "batchCPUThresholdPercent": 50})}


@pytest.mark.parametrize("output", ["json", "text"])
def test_once_warns_a_misspelt_key_with_the_nearest_known_one(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              output: str) -> None:
    state = write_state(tmp_path / "state", cm_data=_typo_data())
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg), "--output", output)
    assert rc == 0, err
    assert err.count(TYPO_WARNING) == 1 and " WARNING colocation-agent: " + TYPO_WARNING in err
    warning = TYPO_WARNING.removeprefix("slo-controller-config: ")
    notice = 'colocation-config: key "batchCPUThresholdPercent" is Koordinator\'s but this agent does not act on it'
    if output == "text":
        assert f"config warning: {warning}\n" in out and f"config notice: {notice}\n" in out
        return
    assert out["configWarnings"] == [warning] and out["configNotices"] == [notice]
    assert out["configError"] is None
    assert out["releaseTargetBytes"] == 2405181686      # the watermark stays at 70 %: 40 % would release 14 Gi


def test_unknown_keys_are_counted_by_section(tmp_path: Path) -> None:
    state = _state(write_state(tmp_path / "state", cm_data=_typo_data()))
    proc, cg = write_node(tmp_path, 8 * GI, {})
    metrics = AgentMetrics()
    agent = Agent(AgentOptions(NODE), Collector(proc, cg), state, metrics=metrics)

    def unknown(section: str) -> float | None:
        return metrics.registry.get_sample_value("colocation_agent_config_unknown_keys", {"section": section})

    agent.cycle(now=0.0)
    agent.cycle(now=1.0)
    assert (unknown("resource-threshold-config"), unknown("colocation-config"), unknown("data")) == (1, 0, 0)
    cm = state.objects("ConfigMap")[0]
    state.upsert("ConfigMap", {**cm, "data": recorded("configmaps-get-slo-controller-config")["data"]})
    agent.cycle(now=2.0)
    assert unknown("resource-threshold-config") == 0


def test_once_reports_a_wrong_type_as_invalid_not_disabled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = recorded("configmaps-get-slo-controller-config")["data"]
    colo = json.loads(data["colocation-config"])
    state = write_state(tmp_path / "state", cm_data={**data, "colocation-config": json.dumps({**colo, "enable": "yes"})})
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg))
    assert rc == 0, err
    problem = 'colocation-config: enable: Input should be a valid boolean (got "yes")'
    assert out["configError"] == problem
    assert err.count("\n") == 1 and err.endswith(
        f" ERROR colocation-agent: slo-controller-config: {problem}; keeping the last good configuration\n")
    assert out["batchReason"].startswith("colocation is off: slo-controller-config koordinator-system/"
                                         f"slo-controller-config is invalid ({problem}) and the last good "
                                         "configuration, in force (the defaults if none was read), does not enable it")


def test_once_kubelet_flags_always_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    state = write_state(tmp_path / "state", configmap=False)
    proc, cg = write_node(tmp_path, 31 * GI, USAGE)        # 1Gi available
    monkeypatch.setenv("NODE_NAME", NODE)
    rc, out, _ = run_once(capsys, "--cluster-state", str(state), "--proc-root", str(proc), "--cgroup-root", str(cg),
                          "--eviction-hard", "memory.available<2Gi")
    assert rc == 0 and out["node"] == NODE
    assert out["releaseTargetBytes"] == GI
    # kubelet ranking: all BE pods exceed their 0 request; priority 3000 first, then the largest.
    assert [(e["name"], e["reason"]) for e in out["evictions"]] == [("be-batch-1", "Evicted")]
    assert out["conditions"][0]["status"] == "True"


def test_once_on_this_machine_runs_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_once(capsys, "--node-name", "here")
    assert rc == 0 and out["evictions"] == [] and out["memory"]["capacityBytes"] > 0


def test_once_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write_state(tmp_path / "state")
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)
    rc, out, _ = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                          "--cgroup-root", str(cg), "--output", "text")
    assert rc == 0
    assert "evict colo-demo/be-batch-1 (uid 8cafaeb2-c37d-453e-99a7-080f42a11635, priority 3000" in out
    assert "condition BEMemoryPressure=True" in out


@pytest.mark.parametrize("name,argv,error", [
    # every flag error names its flag: the kubelet's texts get it as a prefix, pflag's and argparse's carry it
    ("bad threshold", ["--eviction-hard", "memory.available<lots"], "colocation-agent: --eviction-hard: quantities must match"),
    ("unknown signal", ["--eviction-hard", "memory.free<1Gi"], "colocation-agent: --eviction-hard: unsupported eviction signal memory.free"),
    ("hard over 100%", ["--eviction-hard", "memory.available<150%"], "colocation-agent: --eviction-hard: eviction percentage threshold memory.available must be <= 100%: 150%"),
    ("hard no operator", ["--eviction-hard", "memory.available"], 'colocation-agent: invalid argument "memory.available" for "--eviction-hard" flag: malformed pair'),
    ("soft bad quantity", ["--eviction-soft", "memory.available<1Gx", "--eviction-soft-grace-period", "memory.available=1m"], "colocation-agent: --eviction-soft: quantities must match"),
    ("soft without grace", ["--eviction-soft", "memory.available<1Gi"], "colocation-agent: --eviction-soft-grace-period: grace period must be specified for the soft eviction threshold memory.available"),
    ("bad grace", ["--eviction-soft", "memory.available<1Gi", "--eviction-soft-grace-period", "memory.available=soon"], 'colocation-agent: --eviction-soft-grace-period: time: invalid duration "soon"'),
    ("negative grace", ["--eviction-soft", "memory.available<1Gi", "--eviction-soft-grace-period", "memory.available=-1s"], "colocation-agent: --eviction-soft-grace-period: invalid eviction grace period specified: -1s"),
    ("grace signal", ["--eviction-soft-grace-period", "memory.free=1m"], "colocation-agent: --eviction-soft-grace-period: unsupported eviction signal memory.free"),
    ("min reclaim", ["--eviction-minimum-reclaim", "memory.available=-1Mi"], "colocation-agent: --eviction-minimum-reclaim: negative eviction minimum reclaim specified for memory.available"),
    ("min reclaim quantity", ["--eviction-minimum-reclaim", "memory.available=lots"], "colocation-agent: --eviction-minimum-reclaim: quantities must match"),
    ("cpu sample", ["--cpu-sample-seconds", "-1"], "colocation-agent once: argument --cpu-sample-seconds: must be a non-negative number of seconds, got -1"),
    ("config namespace", ["--config-namespace", "Koordinator_System"], 'colocation-agent once: argument --config-namespace: Invalid value: "Koordinator_System": a lowercase RFC 1123 label must consist of'),
    ("empty config namespace", ["--config-namespace", ""], 'colocation-agent once: argument --config-namespace: Invalid value: "": a lowercase RFC 1123 label'),
    ("config name", ["--config-name", "slo_controller_config"], 'colocation-agent once: argument --config-name: Invalid value: "slo_controller_config": a lowercase RFC 1123 subdomain'),
    ("missing cgroup root", ["--cgroup-root", "/nonexistent"], "colocation-agent: --cgroup-root: /nonexistent: no such directory"),
    ("bad transition", ["--eviction-pressure-transition-period", "5"], 'colocation-agent: invalid argument "5" for "--eviction-pressure-transition-period" flag: time: missing unit in duration "5"'),
    ("unreadable proc root", ["--proc-root", "/nonexistent"], "colocation-agent: --proc-root: /nonexistent/meminfo: cannot read"),
    ("missing state folder", ["--cluster-state", "/nonexistent"], "colocation-agent: --cluster-state: /nonexistent: cluster state folder does not exist"),
])
def test_bad_input_is_one_line_exit_2(name: str, argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_once(capsys, "--node-name", "n", *argv)
    assert rc == 2 and out == ""
    assert err.startswith(error) and err.count("\n") == 1 and "Traceback" not in err


def test_broken_state_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.yaml").write_text("kind: Pod\nmetadata: {name: [\n")
    rc, _, err = run_once(capsys, "--node-name", "n", "--cluster-state", str(tmp_path))
    assert rc == 2 and err.startswith(f"colocation-agent: --cluster-state: {tmp_path / 'broken.yaml'}:")
    assert err.count("\n") == 1


@pytest.mark.parametrize("name,argv,error", [
    ("metrics port", ["--metrics-port", "70000"], "colocation-agent run: argument --metrics-port: must be 0..65535, got 70000"),
    ("interval", ["--interval", "0s"], "colocation-agent: --interval: must be positive, got 0s"),
    ("bad interval", ["--interval", "soon"], 'colocation-agent: invalid argument "soon" for "--interval" flag: time: invalid duration "soon"'),
    ("sync timeout", ["--sync-timeout", "-5"], "colocation-agent run: argument --sync-timeout: must be a non-negative number of seconds"),
])
def test_run_flag_errors_name_the_flag(name: str, argv: list[str], error: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("run", "--node-name", "n", "--dry-run", "--metrics-port", "0", *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(error) and err.count("\n") == 1


def test_missing_node_name_is_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    rc, _, err = run_once(capsys)
    assert rc == 2 and err == "colocation-agent: --node-name is required (or set NODE_NAME)\n"


def test_run_without_cluster_is_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["run", "--node-name", "n", "--metrics-port", "0"]) == 2
    assert "no cluster" in capsys.readouterr().err


# -- acting, against recorded responses ----------------------------------------------------------------
def _api(srv: ReplayAPIServer):  # type: ignore[no-untyped-def]
    from kubernetes import client

    cfg = client.Configuration(host=srv.url)
    return client.ApiClient(cfg)


def _state(folder: Path) -> ClusterState:
    state = ClusterState(AGENT_KINDS)
    FilesSource(folder, state).load()
    return state


@pytest.fixture()
def srv() -> Iterator[ReplayAPIServer]:
    with ReplayAPIServer() as s:
        yield s


def _evict_path(name: str) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{name}/eviction"


def test_actions_against_recorded_responses(srv: ReplayAPIServer) -> None:
    srv.add_exchange("eviction-success")
    srv.add_exchange("eviction-pdb-blocked-429")
    srv.add_exchange("eviction-missing-pod-404")
    srv.add_exchange("eviction-uid-precondition-mismatch", path=_evict_path("recreated"))
    srv.add_json("POST", _evict_path("broken"), {"kind": "Status", "status": "Failure", "code": 500}, status=500)
    events = EventsAPI(srv, (NS,))
    srv.add_exchange("nodes-status-patch-smp-add-batch")
    actions = KubeActions(_api(srv), NODE)
    assert actions.evict(NS, "be-evict-ok", "0106db4a-d5ba-46cf-adb1-f133c4e76d43").outcome is EvictOutcome.EVICTED
    blocked = actions.evict(NS, "be-protected", "bbea0be5")
    assert (blocked.outcome, blocked.code) == (EvictOutcome.BLOCKED, 429)
    assert blocked.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert actions.evict(NS, "does-not-exist", "x").outcome is EvictOutcome.GONE
    assert actions.evict(NS, "recreated", "x").outcome is EvictOutcome.CONFLICT
    assert actions.evict(NS, "broken", "x").outcome is EvictOutcome.FAILED
    assert actions.event({"kind": "Pod", "apiVersion": "v1", "namespace": NS, "name": "be-evict-ok", "uid": "u"},
                         "evictPodSuccess", "m", "Evict")
    assert len(events.stored) == 1
    assert actions.patch_node_status({"status": {"allocatable": {"kubernetes.io/batch-cpu": "25000"}}})
    sent = srv.requests_to("POST", _evict_path("be-evict-ok"))[0]
    assert sent.body == {"apiVersion": "policy/v1", "kind": "Eviction",
                         "metadata": {"name": "be-evict-ok", "namespace": NS},
                         "deleteOptions": {"preconditions": {"uid": "0106db4a-d5ba-46cf-adb1-f133c4e76d43"}}}
    patch = srv.requests_to("PATCH", f"/api/v1/nodes/{NODE}/status")[0]
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"


def test_api_calls_declared() -> None:
    assert set(API_CALLS) == {("", "pods/eviction", "create"), ("events.k8s.io", "events", "create"),
                              ("events.k8s.io", "events", "patch"), ("", "nodes/status", "patch")}


def _acting_agent(tmp_path: Path, srv: ReplayAPIServer, usage: dict[str, int], used: int = 24 * GI,
                  **options: Any) -> Agent:
    state = _state(write_state(tmp_path / "state"))
    proc, cg = write_node(tmp_path, used, usage)
    return Agent(AgentOptions(NODE, **options), Collector(proc, cg), state, KubeActions(_api(srv), NODE))


def _routes_for_acting(srv: ReplayAPIServer, protected_status: str = "eviction-pdb-blocked-429") -> EventsAPI:
    srv.add_exchange("eviction-success")
    if protected_status.startswith("eviction"):
        srv.add_exchange(protected_status)
    else:
        srv.add_json("POST", _evict_path("be-protected"), {"kind": "Status", "code": 500}, status=500)
    srv.add_exchange("nodes-status-patch-smp-add-batch")
    return EventsAPI(srv, (NS,))


@pytest.mark.parametrize("refusal", ["eviction-pdb-blocked-429", "500"])
def test_refused_eviction_moves_on_and_nothing_beyond_need(tmp_path: Path, srv: ReplayAPIServer, refusal: str) -> None:
    events = _routes_for_acting(srv, refusal)
    # be-batch-1 (priority 3000) has no cgroup: no usage, never a candidate.
    usage = {"be-protected": 3 * GI, "be-evict-ok": 5 * GI // 2, "be-batch-0": GI // 10, "ls-web-0": 8 * GI}
    agent = _acting_agent(tmp_path, srv, usage)
    out = agent.cycle(now=100.0).as_dict()
    assert [e["name"] for e in out["evictions"]] == ["be-evict-ok"]
    posts = [r.path for r in srv.received if r.path.endswith("/eviction")]
    assert posts == [_evict_path("be-protected"), _evict_path("be-evict-ok")]     # biggest first, then next
    failed, evicted = (r.body for r in events.creates())
    # The refused one first: koordlet's evictPodFail, its message (``pkg/koordlet/qosmanager/plugins/util/evictor.go``)
    # and the API's answer.
    assert (failed["reason"], failed["action"], failed["type"]) == ("evictPodFail", "Evict", "Warning")
    assert failed["regarding"]["name"] == "be-protected"
    assert failed["note"].startswith("evict Pod:be-protected, reason: EvictPodByNodeMemoryUsage, message: "
                                     "killAndEvictBEPods for node(colo-node-1), need to release memory: 2405181686, "
                                     "error ")
    assert (evicted["reason"], evicted["action"], evicted["type"]) == ("evictPodSuccess", "Evict", "Warning")
    assert evicted["note"] == ("evict Pod:be-evict-ok, reason: EvictPodByNodeMemoryUsage, message: "
                               "killAndEvictBEPods for node(colo-node-1), need to release memory: 2405181686")
    assert evicted["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": "be-evict-ok",
                                    "uid": "0106db4a-d5ba-46cf-adb1-f133c4e76d43"}
    assert (evicted["reportingController"], evicted["reportingInstance"]) == ("colocation-agent", NODE)
    assert len(events.stored) == 2
    patches = [r.body for r in srv.requests_to("PATCH", f"/api/v1/nodes/{NODE}/status")]
    assert not any("allocatable" in p["status"] for p in patches)     # a first cycle has no CPU rate: none yet
    assert any(c["type"] == "BEMemoryPressure" and c["status"] == "True"
               for p in patches for c in p["status"].get("conditions", []))
    # Within the 4 s cooldown nothing more; after it, be-evict-ok still counts as releasing.
    agent.cycle(now=101.0)
    agent.cycle(now=105.0)
    assert len([r for r in srv.received if r.path.endswith("/eviction")]) == 2
    assert not srv.requests_to("POST", _evict_path("ls-web-0"))


def test_the_eviction_request_goes_before_the_rest_of_the_node_is_measured(tmp_path: Path, srv: ReplayAPIServer,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    _routes_for_acting(srv)
    usage = {"be-protected": 3 * GI, "be-evict-ok": 5 * GI // 2, "ls-web-0": 8 * GI}
    agent = _acting_agent(tmp_path, srv, usage)
    ticks = iter([100.0, 103.5])
    agent.clock = lambda: next(ticks)
    measured: list[tuple[float, float]] = []       # (when, the stamp the CPU counters got)
    real_collect, real_pod_memory = Collector.collect, Collector.pod_memory
    asked: list[list[str]] = []

    def collect(self: Collector, now: float) -> Any:
        measured.append((time.monotonic(), now))
        return real_collect(self, now)

    def pod_memory(self: Collector, now: float, uids: Any) -> Any:
        asked.append(list(uids))
        return real_pod_memory(self, now, uids)

    monkeypatch.setattr(Collector, "collect", collect)
    monkeypatch.setattr(Collector, "pod_memory", pod_memory)
    out = agent.cycle().as_dict()
    assert [e["name"] for e in out["evictions"]] == ["be-evict-ok"]
    first = next(r for r in srv.received if r.path.endswith("/eviction"))
    assert len(measured) == 1 and first.at < measured[0][0]   # the request first, then the pods' CPU and the rest
    assert measured[0][1] == 103.5                             # counters stamped when read, not when the cycle began
    pods = pods_by_name()
    be = {pods[n]["metadata"]["uid"] for n in pods if n.startswith("be-")}
    assert len(asked) == 1 and set(asked[0]) == be              # only the BE pods' memory before the request
    assert out["memory"]["usedBytes"] == 24 * GI and out["cgroupWrites"]


def test_the_nodes_pods_are_one_list_until_the_state_changes(tmp_path: Path) -> None:
    import copy

    state = _state(write_state(tmp_path / "state"))
    pods = state.pods_on_node(NODE)
    assert state.pods_on_node(NODE) is pods               # the agent's per-pod work is kept while it is the same
    extra = copy.deepcopy(pods[0])
    extra["metadata"].update(name="be-new", uid="00000000-0000-4000-8000-00000000000a")
    state.upsert("Pod", extra)
    assert extra in state.pods_on_node(NODE) and state.pods_on_node(NODE) is not pods
    state.delete("Pod", extra)
    assert extra not in state.pods_on_node(NODE)
    assert state.pods_on_node("another-node") == []


def test_dry_run_acts_on_nothing(tmp_path: Path, srv: ReplayAPIServer) -> None:
    usage = {"be-evict-ok": 5 * GI // 2, "ls-web-0": 8 * GI}
    agent = _acting_agent(tmp_path, srv, usage, dry_run=True)
    out = agent.cycle(now=0.0).as_dict()
    assert [e["name"] for e in out["evictions"]] == ["be-evict-ok"]
    assert srv.received == []


def test_invalid_config_reported_once_with_event(tmp_path: Path, srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, ("koordinator-system",))
    srv.add_exchange("nodes-status-patch-smp-add-batch")
    state = _state(write_state(tmp_path / "state", cm_data={"colocation-config": "{not json"}))
    proc, cg = write_node(tmp_path, 8 * GI, {})
    agent = Agent(AgentOptions(NODE), Collector(proc, cg), state, KubeActions(_api(srv), NODE))
    for t in range(3):
        agent.cycle(now=float(t))
    (event,) = [r.body for r in events.creates()]
    assert event["regarding"]["kind"] == "ConfigMap"
    assert (event["reason"], event["action"]) == ("ColocationCfgInvalid", "LoadConfig")
    assert event["note"].startswith("colocation-config: invalid JSON")
    assert len(events.stored) == 1


def test_a_wrong_type_keeps_the_last_good_config_and_is_reported_once(tmp_path: Path, srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, ("koordinator-system",))
    srv.add_exchange("nodes-status-patch-smp-add-batch")
    state = _state(write_state(tmp_path / "state"))
    proc, cg = write_node(tmp_path, 8 * GI, {})
    metrics = AgentMetrics()
    agent = Agent(AgentOptions(NODE), Collector(proc, cg), state, KubeActions(_api(srv), NODE), metrics)
    agent.cycle(now=0.0)
    cm = state.objects("ConfigMap")[0]
    colo = json.loads(cm["data"]["colocation-config"])
    state.upsert("ConfigMap", {**cm, "data": {**cm["data"], "colocation-config": json.dumps({**colo, "enable": "yes"})}})
    outs = [agent.cycle(now=float(t)).as_dict() for t in range(1, 4)]
    problem = 'colocation-config: enable: Input should be a valid boolean (got "yes")'
    assert all(o["configError"] == problem for o in outs)
    assert not any((o["batchReason"] or "").startswith("colocation is") for o in outs)   # still enabled
    assert agent.inputs.read().colocation.enable and agent.inputs.read().memory_evict.enable
    assert metrics.registry.get_sample_value("colocation_agent_config_errors_total") == 1
    (event,) = [r.body for r in events.creates()]
    assert (event["reason"], event["type"]) == ("ColocationCfgInvalid", "Warning")
    assert event["note"] == f"{problem}; keeping the last good configuration"


def test_kubelet_threshold_event_is_evicted(tmp_path: Path, srv: ReplayAPIServer) -> None:
    srv.add_exchange("eviction-success")
    events = EventsAPI(srv, (NS,))
    srv.add_exchange("nodes-status-patch-smp-add-batch")
    state = _state(write_state(tmp_path / "state", configmap=False))
    proc, cg = write_node(tmp_path, 31 * GI, {"be-evict-ok": 2 * GI})
    agent = Agent(AgentOptions(NODE, parse_thresholds(hard="memory.available<1536Mi")), Collector(proc, cg), state,
                  KubeActions(_api(srv), NODE))
    assert [e["reason"] for e in agent.cycle(now=0.0).as_dict()["evictions"]] == ["Evicted"]
    (event,) = [r.body for r in events.creates()]
    assert event["reason"] == "Evicted"
    assert event["note"] == "The node was low on resource: memory. Threshold quantity: 1536Mi, available: 1Gi. "


def test_node_measure_failure_is_not_fatal(tmp_path: Path) -> None:
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)
    agent = Agent(AgentOptions(NODE), Collector(proc, cg))
    (proc / "meminfo").write_text("MemTotal: 1")
    out = agent.cycle(now=0.0).as_dict()
    assert out["memory"] is None and out["evictions"] == []


def test_run_dry_run_logs_decisions_and_stops_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    state = write_state(tmp_path / "state")
    proc, cg = write_node(tmp_path, 24 * GI, USAGE)
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.Popen([sys.executable, "-m", "webhook.cli.agent", "run", "--node-name", NODE, "--cluster-state",
                          str(state), "--proc-root", str(proc), "--cgroup-root", str(cg), "--dry-run",
                          "--interval", "100ms", "--metrics-port", "0"],
                         stderr=subprocess.PIPE, text=True, cwd=repo,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    import threading

    lines: list[str] = []
    assert p.stderr is not None
    stderr = p.stderr
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(any(w in ln for ln in lines) for w in (
            "would set node condition", "would patch node")):
        if p.poll() is not None:
            break
        tick_cpu(proc)                      # time passes on the node: a CPU rate from the second cycle on
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=10)
    reader.join(timeout=5)
    text = "".join(lines)
    assert "dry-run: would evict colo-demo/be-batch-1" in text
    assert "dry-run: would patch node colo-node-1 status" in text
    assert "dry-run: would write kubepods.slice/kubepods-besteffort.slice/" in text
    assert p.returncode == 0 and "Traceback" not in text
