"""What a cycle says about itself (issue 41): why BE CPU suppression does not act where the config enables it
(``cpuSuppress.reason``), and a dry run's node-status patch said once per change, not every cycle."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from harness.agent_trees import tick_cpu
from tests.agent.test_cycle import GI, NODE, USAGE, _state, recorded, run_once, write_node, write_state
from webhook.agent.cycle import Agent
from webhook.agent.edges.collectors import Collector
from webhook.agent.options import AgentOptions

pytestmark = pytest.mark.usefixtures("restore_logging")
BESTEFFORT = "kubepods.slice/kubepods-besteffort.slice"


def _suppressing(policy: str) -> dict[str, str]:
    data = recorded("configmaps-get-slo-controller-config")["data"]
    thr = json.loads(data["resource-threshold-config"])
    thr["clusterStrategy"] = {**thr["clusterStrategy"], "enable": True, "cpuSuppressPolicy": policy}
    return {**data, "resource-threshold-config": json.dumps(thr)}


@pytest.mark.parametrize("policy", ["cfsQuota", "cpuset"])
def test_suppression_without_a_besteffort_folder_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          policy: str) -> None:
    state = write_state(tmp_path / "state", cm_data=_suppressing(policy))
    proc, cg = write_node(tmp_path, 8 * GI, {"ls-web-0": GI})
    shutil.rmtree(cg / BESTEFFORT)
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg))
    assert rc == 0, err
    assert out["cpuSuppress"] == {"policy": policy, "beCPUs": None, "cores": None, "fallback": None,
                                  "reason": f"no besteffort folder {BESTEFFORT} in the cpu controller: no "
                                            "besteffort tier to cap (the kubelet makes it at start, with "
                                            "cgroupsPerQOS)"}
    rc, text, _ = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                           "--cgroup-root", str(cg), "--output", "text")
    assert f"cpu suppress: {policy} does not act: no besteffort folder {BESTEFFORT} in" in text


def test_suppression_with_its_folder_has_no_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write_state(tmp_path / "state", cm_data=_suppressing("cfsQuota"))
    proc, cg = write_node(tmp_path, 8 * GI, USAGE)
    rc, out, err = run_once(capsys, "--node-name", NODE, "--cluster-state", str(state), "--proc-root", str(proc),
                            "--cgroup-root", str(cg))
    assert rc == 0, err
    assert out["cpuSuppress"]["policy"] == "cfsQuota" and out["cpuSuppress"]["reason"] is None


def test_a_dry_run_says_its_node_status_patch_once_per_change(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = _state(write_state(tmp_path / "state"))
    proc, cg = write_node(tmp_path, 8 * GI, USAGE)
    agent = Agent(AgentOptions(NODE, dry_run=True), Collector(proc, cg), state)
    caplog.set_level(logging.INFO, "colocation-agent")
    for t in range(6):
        agent.cycle(now=float(t))
        tick_cpu(proc)

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "would patch node" in r.getMessage()]

    assert len(said()) == 1, said()   # the node status never takes the patch: every cycle would send it again
    node = state.objects("Node")[0]
    allocatable = {**node["status"]["allocatable"], "memory": str(16 * GI)}
    state.upsert("Node", {**node, "status": {**node["status"], "allocatable": allocatable}})
    agent.cycle(now=7.0)       # less memory to lend: another body, said
    agent.cycle(now=8.0)
    assert len(said()) == 2, said()
